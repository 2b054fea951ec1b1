"""`streamdet review`: serve the desk, draw pages to judge, export the labels, report
precision, add a user. Its service modules load when a command runs, not with the parser.

    streamdet review --state DIR [--events PATH]      # serve on 127.0.0.1:8088
    streamdet review --broker HOST:PORT [--prefix P]  # the Kafka desk (kafka_desk.py)
    streamdet review sample N --state DIR --events PATH    (or --broker HOST:PORT)
    streamdet review export | precision [--all] [--json]   (--desk DIR, or --broker)
    streamdet review passwd USER --users FILE

The desk directory (`--desk`, default DIR-review; with --broker, ./streamdet-review)
keeps the labels (labels.sqlite; on Kafka they are on the labels topic), the key that
signs session cookies (session.key) and, when no credentials are given, the token it
made (token, mode 0600): it never runs open. Instances of a Kafka desk that share
sessions share a desk directory, or the same --token-file or --users."""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import json
import os
import secrets
import socket
import stat
import sys
from typing import TYPE_CHECKING

from ..console import UsageError, env
from .label_store import private_dir

if TYPE_CHECKING:
    from .auth import Credentials
    from .desk import Desk
    from .sessions import SessionStore

ACTIONS = ("serve", "sample", "export", "precision", "passwd")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "review", help="the spam team's review desk: quilts beside their sources, labels, "
        "precision (a web UI and a JSON API)",
        description="Serve the review desk (default), or: `sample N` draws N quilted pages "
        "uniformly to judge; `export` prints every label as JSONL; `precision` prints the "
        "spam share per parameter setting and kind of page; `passwd USER` adds a user to "
        "--users FILE.")
    p.add_argument("action", nargs="?", choices=ACTIONS, default="serve")
    p.add_argument("arg", nargs="?", help="sample: N pages; passwd: USER")
    p.add_argument("--state", default=env("STATE"), metavar="DIR",
                   help="a `streamdet run` state (read-only; a run may be writing it)")
    p.add_argument("--events", default=env("REVIEW_EVENTS"), metavar="PATH",
                   help="that run's --events file, followed as it grows (without it the "
                   "quilts are read from the state once, with no history)")
    p.add_argument("--broker", default=env("BROKER"), metavar="HOST:PORT",
                   help="serve the Kafka desk: the pipeline's events and pages from its "
                   "topics, labels on its labels topic (instead of --state)")
    p.add_argument("--prefix", default=env("PREFIX", "streamdet"),
                   help="with --broker: the pipeline's topic name prefix (default streamdet)")
    p.add_argument("--group", default=env("REVIEW_GROUP", "streamdet-review"),
                   help="with --broker: the desk's consumer group, shared by its instances "
                   "(default streamdet-review)")
    p.add_argument("--desk", default=env("REVIEW_DESK"), metavar="DIR",
                   help="where labels, the session key and a made token are kept "
                   "(default DIR-review beside --state; with --broker, ./streamdet-review)")
    p.add_argument("--bind", default=env("REVIEW_BIND", "127.0.0.1:8088"), metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:8088: this machine only)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--token-file", default=env("REVIEW_TOKEN_FILE"), metavar="FILE",
                     help="the desk's token, read from FILE (default: made in the desk "
                     "directory)")
    who.add_argument("--users", default=env("REVIEW_USERS"), metavar="FILE",
                     help="users with scrypt-hashed passwords, `user:scrypt$...` lines "
                     "(`streamdet review passwd USER --users FILE` adds one)")
    p.add_argument("--seed", type=int, default=1, help="sample: the draw's seed (default 1)")
    p.add_argument("--all", action="store_true",
                   help="precision: count every label, not only those of drawn pages")
    p.add_argument("--json", action="store_true", help="precision: one JSON object")
    p.set_defaults(func=cmd_review)
    return p


def cmd_review(args: argparse.Namespace) -> int:
    if args.action == "passwd":
        return _passwd(args)
    if args.broker:
        return _on_kafka(args)
    desk_dir = desk_directory(args)
    if args.action == "export":
        with DeskLabels(desk_dir) as labels:
            _print_export(labels.all())
        return 0
    if args.action == "precision":
        with DeskLabels(desk_dir) as labels:
            return _print_precision(precision_of(labels.current(), args), args.json)
    if args.state is None:
        raise UsageError("give --state DIR (a `streamdet run` state) or --broker HOST:PORT "
                         "(a Kafka pipeline) to review")
    desk = _desk(args, desk_dir)
    try:
        if args.action == "sample":
            return _sample(desk, args)
        return _serve(desk, args, desk_dir)
    finally:
        desk.source.close()
        desk.labels.close()


def _on_kafka(args: argparse.Namespace) -> int:
    """The desk's actions on a Kafka pipeline (kafka_desk, kafka_reads)."""
    import asyncio

    from ..adapters.kafka import PipelineError, Topics, pipeline_params
    from ..adapters.outputs import utc_now
    from .kafka_desk import DeskUnavailable
    from .kafka_reads import read_labels, sample

    if args.action == "serve":
        return _serve_kafka(args, desk_directory(args))
    labels_topic = Topics.named(args.prefix).labels
    try:
        if args.action == "export":
            _print_export(asyncio.run(read_labels(args.broker, labels_topic)).all())
            return 0
        if args.action == "precision":
            labels = asyncio.run(read_labels(args.broker, labels_topic))
            return _print_precision(precision_of(labels.current(), args), args.json)
        topics = Topics.named(args.prefix)
        params = asyncio.run(pipeline_params(args.broker, topics))
        drawn = asyncio.run(sample(args.broker, topics, labels_topic, _draw_size(args),
                                   args.seed, params.to_dict() if params else {}, utc_now()))
    except (DeskUnavailable, PipelineError) as exc:
        raise UsageError(str(exc)) from None
    return _print_draw(drawn, args.seed)


def desk_path(args: argparse.Namespace) -> str:
    """Where the desk's directory is: --desk, else DIR-review beside --state, else (on
    Kafka) ./streamdet-review."""
    if args.desk:
        return args.desk
    if args.state:
        return args.state.rstrip("/") + "-review"
    if getattr(args, "broker", None):
        return "streamdet-review"
    raise UsageError("give --desk DIR (or --state DIR: its desk is DIR-review)")


def desk_directory(args: argparse.Namespace) -> str:
    """The desk's directory, made private (0700): it holds the token, the session key and
    the labels, which name reviewers and what they judged."""
    path = desk_path(args)
    try:
        private_dir(path)
    except OSError as exc:
        raise UsageError(f"cannot make the desk directory {path}: {exc.strerror}") from None
    return path


class DeskLabels:
    """The desk's label store, closed on exit."""

    def __init__(self, desk_dir: str) -> None:
        from .label_store import LabelStore, LabelStoreError

        path = os.path.join(desk_dir, "labels.sqlite")
        try:
            self.store = LabelStore(path)
        except LabelStoreError as exc:
            raise UsageError(str(exc)) from None

    def __enter__(self):
        return self.store

    def __exit__(self, *exc) -> None:
        self.store.close()


def _desk(args: argparse.Namespace, desk_dir: str) -> Desk:
    from ..adapters.outputs import utc_now
    from ..reading.states import open_store
    from .desk import Desk
    from .embedded import EmbeddedSource

    source = EmbeddedSource(lambda: open_store(args.state, must_exist=True, read_only=True),
                            args.events)
    source.open()
    return Desk(source, DeskLabels(desk_dir).store, utc_now)


def _sample(desk: Desk, args: argparse.Namespace) -> int:
    from .desk import DeskError

    try:
        drawn = desk.sample(_draw_size(args), args.seed)
    except DeskError as exc:
        raise UsageError(str(exc)) from None
    return _print_draw(drawn, args.seed)


def _draw_size(args: argparse.Namespace) -> int:
    try:
        n = int(args.arg or "")
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError("review sample N: N pages, a number >= 1")
    return n


def _print_draw(drawn: dict, seed: int) -> int:
    print(f"streamdet: draw {drawn['name']}: {len(drawn['urls'])} pages (seed {seed}); "
          f"judge them at /draws/{drawn['name']}", file=sys.stderr)
    for url in drawn["urls"]:
        print(url)
    return 0


def _print_export(labels) -> None:
    for lab in labels:
        sys.stdout.write(lab.to_json() + "\n")


def precision_of(current, args: argparse.Namespace) -> dict:
    from .precision import precision_report

    return precision_report(current, sampled=not args.all)


def _print_precision(report: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report, sort_keys=True))
        return 0
    print("judged\tspam\tnot_spam\tunsure\tshare\tinterval95\tkind\tparams")
    for r in report["rows"]:
        share = "-" if r["spam_share"] is None else f"{r['spam_share']:.3f}"
        iv = "-" if r["interval95"] is None else "{:.3f}-{:.3f}".format(*r["interval95"])
        print(f"{r['judged']}\t{r['spam']}\t{r['not_spam']}\t{r['unsure']}\t{share}\t{iv}\t"
              f"{r['kind']}\t{json.dumps(r['params'], sort_keys=True)}")
    if report["sampled_only"] and report["left_out"]:
        print(f"streamdet: {report['left_out']} labels of pages not drawn left out (--all "
              "counts them)", file=sys.stderr)
    return 0


def _passwd(args: argparse.Namespace) -> int:
    from .auth import AuthError, hash_password, weak_password

    if not args.users or not args.arg:
        raise UsageError("review passwd USER --users FILE")
    user = args.arg
    if ":" in user or not user.strip():
        raise UsageError("a user name has no ':'")
    password = (sys.stdin.readline().rstrip("\n") if not sys.stdin.isatty()
                else getpass.getpass(f"password for {user}: "))
    if (weak := weak_password(user, password)) is not None:
        raise UsageError(f"refused: {weak}")
    try:
        line = f"{user}:{hash_password(password)}\n"
    except AuthError as exc:
        raise UsageError(str(exc)) from None
    kept = []
    if os.path.exists(args.users):
        with open(args.users, encoding="utf-8") as f:
            kept = [x for x in f if not x.startswith(f"{user}:")]
    fd = os.open(args.users + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                 stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines([*kept, line])
    os.replace(args.users + ".new", args.users)
    print(f"streamdet: {user} set in {args.users}", file=sys.stderr)
    return 0


def credentials(args: argparse.Namespace, desk_dir: str) -> Credentials:
    """The desk's credentials: --users, --token-file, STREAMDET_REVIEW_TOKEN, or a token
    made in the desk directory (its path is printed, never the token)."""
    from .auth import AuthError, Credentials

    try:
        if args.users:
            return Credentials.from_users_file(args.users)
        if args.token_file:
            return Credentials.from_token_file(args.token_file)
        if env("REVIEW_TOKEN"):
            return Credentials(token=env("REVIEW_TOKEN"))
        path = os.path.join(desk_dir, "token")
        made = not os.path.exists(path)
        found = Credentials.made_in(path)
        if made:
            print(f"streamdet: review: a token was made in {path} (mode 0600): log in with "
                  "it", file=sys.stderr)
        return found
    except AuthError as exc:
        raise UsageError(str(exc)) from None


def session_key(desk_dir: str) -> str:
    """The key that signs session cookies, kept (0600) so a restart keeps sessions."""
    path = os.path.join(desk_dir, "session.key")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    except FileExistsError:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        key = secrets.token_urlsafe(32)
        f.write(key + "\n")
    return key


def sessions(desk_dir: str) -> SessionStore:
    """The desk's browser sessions (review.sessions), kept beside its labels."""
    from .sessions import SessionStore

    return SessionStore(os.path.join(desk_dir, "sessions.sqlite"))


def bind_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise UsageError(f"--bind wants HOST:PORT, not {text!r}")
    return host.strip("[]"), int(port)


def _serve(desk: Desk, args: argparse.Namespace, desk_dir: str) -> int:
    import uvicorn

    from .web import create_app

    host, port = bind_address(args.bind)
    app = create_app(desk, credentials(args, desk_dir), session_key(desk_dir),
                     sessions(desk_dir))
    if not _loopback(host):
        print(f"streamdet: review: listening on {host}, beyond this machine (--bind)",
              file=sys.stderr)
    desk.source.refresh()
    sock = _listening(host, port)
    port = sock.getsockname()[1]  # --bind HOST:0 takes any free port
    print(f"streamdet: review desk on http://{host}:{port}/ ({len(desk.source.view.quilts)} "
          "pages in its view)", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", server_header=False))
    server.run(sockets=[sock])
    return 0


def _serve_kafka(args: argparse.Namespace, desk_dir: str) -> int:
    import asyncio
    import threading

    from ..adapters.kafka import PipelineError
    from ..adapters.outputs import utc_now
    from .desk import Desk
    from .kafka_desk import DeskUnavailable, KafkaDesk, KafkaSettings, run
    from .web import create_app

    host, port = bind_address(args.bind)
    lock = threading.RLock()
    try:
        source = KafkaDesk(KafkaSettings(args.broker, args.prefix, args.group,
                                         os.path.join(desk_dir, "faust")), lock)
        asyncio.run(source.prepare())
    except (DeskUnavailable, PipelineError) as exc:
        raise UsageError(str(exc)) from None
    desk = Desk(source, source.labels, utc_now, lock)
    app = create_app(desk, credentials(args, desk_dir), session_key(desk_dir),
                     sessions(desk_dir))
    if not _loopback(host):
        print(f"streamdet: review: listening on {host}, beyond this machine (--bind)",
              file=sys.stderr)
    sock = _listening(host, port)

    def announce() -> None:
        print(f"streamdet: review desk on http://{host}:{sock.getsockname()[1]}/ (Kafka "
              f"{args.broker}, prefix {args.prefix}, group {args.group}; "
              f"{len(source.view.quilts)} pages in its view)", file=sys.stderr, flush=True)
    run(source, app, sock, announce)
    return 0


def _listening(host: str, port: int) -> socket.socket:
    """A listening TCP socket. Made with its protocol named: asyncio sets TCP_NODELAY only
    on connections of such a socket, and without it a response written in two parts
    (head, body) waits ~40 ms for the client's delayed ACK."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
