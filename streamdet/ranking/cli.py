"""`streamdet label URL (--spam | --not-spam)` and `streamdet rank` (SPEC §10), on a
`streamdet run` state or on the shards of worker states. Labels are the review desk's: on
a run state the same SQLite store (review.label_store) in the desk directory (default
DIR-review beside --state), so a verdict given here shows on the desk and one given on
the desk trains the ranking; `label` also stores the model the labels train, and the
verdicts, in the state: the `spam_score` of later events follows them
(engine.spam_model). On a Kafka pipeline (`label --broker`) the label goes to the labels
topic, where the Kafka desk writes its judgements; the workers bring it to their doc
shards, which store the verdict and train the model (engine.spam_labels), and `rank` on
worker states reads the verdicts the doc shards hold."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import TYPE_CHECKING

from ..console import UsageError, env
from ..reading.states import DEFAULT_STATE

if TYPE_CHECKING:
    from ..review.labels import Label


def add_parsers(sub) -> None:
    """Register `label` and `rank` on the top-level subparsers."""
    lab = sub.add_parser("label", help="record a reviewer's verdict on a page (the review "
                         "desk's labels): it decides that page and trains the ranking")
    lab.add_argument("url")
    verdict = lab.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--spam", dest="verdict", action="store_const", const="spam")
    verdict.add_argument("--not-spam", dest="verdict", action="store_const", const="not_spam")
    lab.add_argument("--note", default="", help="a sentence for the other reviewers")
    lab.add_argument("--who", default=None, help="who judged (default: the login name)")
    rank = sub.add_parser("rank", help="the quilted and partially duplicated pages by spam "
                          "score, highest first, with the signals that decided each")
    rank.add_argument("--json", action="store_true",
                      help='one {"url", "score", "spam", "why"} object per line')
    rank.add_argument("--top", type=int, metavar="N", help="the first N pages only")
    lab.add_argument("--state", action="append", metavar="DIR",
                     help=f"a `streamdet run` state (default {DEFAULT_STATE}), or with "
                     "--broker worker states: repeat for each worker's directory")
    lab.add_argument("--broker", default=env("BROKER"), metavar="HOST:PORT",
                     help="label a page of a Kafka pipeline: the label goes to its labels "
                     "topic (PREFIX-review-labels), as the Kafka review desk's do")
    lab.add_argument("--prefix", default=env("PREFIX", "streamdet"),
                     help="with --broker: the pipeline's topic name prefix (default "
                     "streamdet)")
    rank.add_argument("--state", action="append", metavar="DIR",
                      help=f"a `streamdet run` state (default {DEFAULT_STATE}), or worker "
                      "states: repeat for each worker's directory")
    for p in (lab, rank):
        p.add_argument("--desk", default=None, metavar="DIR",
                       help="the review desk directory that keeps the labels (default "
                       "DIR-review beside --state; on worker states, rank reads the "
                       "verdicts their doc shards hold)")
    lab.set_defaults(func=cmd_label)
    rank.set_defaults(func=cmd_rank)


def _run_state(path: str):
    """The `streamdet run` state at `path`, opened read-only. Worker states are refused
    in one line: a label for them goes to their pipeline's labels topic (--broker)."""
    from ..reading.states import open_store, worker_shards

    if worker_shards([path]) is not None:
        raise UsageError(f"{path} holds worker states: label a page of a Kafka pipeline "
                         "with --broker HOST:PORT (and --prefix), giving the workers' "
                         "--state directories")
    return open_store(path, must_exist=True, read_only=True)


def cmd_label(args: argparse.Namespace) -> int:
    from ..review.cli import DeskLabels, desk_directory
    from .reading import verdicts_of

    states = args.state or [DEFAULT_STATE]
    if args.broker:
        return _label_pipeline(args, states)
    if len(states) > 1:
        raise UsageError("several --state directories are only for worker states (with "
                         "--broker)")
    args.state = states[0]
    store = _run_state(args.state)
    try:
        label = _label_of(args, store)
    finally:
        store.close()
    with DeskLabels(desk_directory(args)) as labels:
        label = labels.add(label)
        verdicts = verdicts_of(labels.current())
    print(f"streamdet: {label.url} labelled {label.verdict} (label {label.id})",
          file=sys.stderr)
    _teach_state(args.state, verdicts)
    return 0


def _label_of(args: argparse.Namespace, store) -> Label:
    """The label of `args.url`, a page `store` holds, with the state's parameters (a
    URL it does not hold: a usage error, with the spellings of it that it holds)."""
    from ..adapters.outputs import utc_now
    from ..engine.params import Params
    from ..reading.explain import Missing, look_up
    from ..review.labels import Label, LabelError, page_kind

    found = look_up(store, args.url)
    if isinstance(found, Missing):
        raise UsageError(found.message)
    params = Params.from_fingerprint(store.meta("params")).to_dict()
    try:
        return Label(found.url, args.verdict, args.who or _login(), utc_now(), args.note,
                     params, page_kind(found.url))
    except LabelError as exc:
        raise UsageError(str(exc)) from None


def _label_pipeline(args: argparse.Namespace, states: list[str]) -> int:
    """label --broker: the label of a page of worker states (looked up in its doc shard)
    to the pipeline's labels topic, as the Kafka desk writes its judgements. The workers
    forward it to every doc shard, which store the verdict and train the model on it
    (engine.spam_labels): the `spam_score` of later events follows it."""
    import asyncio

    from aiokafka.errors import KafkaError

    from ..adapters.kafka import PipelineError, Topics, topic_names
    from ..engine.routing import url_shard
    from ..reading.states import open_store, worker_shards
    from ..review.kafka_reads import write_label

    found = worker_shards(states)
    if found is None:
        raise UsageError("--broker labels a page of a Kafka pipeline: give the workers' "
                         "states (--state DIR, repeated)")
    docs, _, shards = found
    url = args.url.strip()
    path = docs.get(url_shard(url, shards)) if shards else None
    if path is None:
        raise UsageError(f"these worker states lack the doc shard of {url}: give the "
                         "--state of every worker")
    store = open_store(path, must_exist=True, read_only=True)
    try:
        label = _label_of(args, store)
    finally:
        store.close()
    topics = Topics.named(args.prefix)
    try:
        if topics.meta not in asyncio.run(topic_names(args.broker)):
            raise UsageError(f"no pipeline {args.prefix} on {args.broker}")
        label = asyncio.run(write_label(args.broker, topics.labels, label))
    except (PipelineError, KafkaError, OSError) as exc:
        raise UsageError(f"cannot write to {topics.labels} on {args.broker}: {exc}") from None
    print(f"streamdet: {label.url} labelled {label.verdict} (label {label.id} on "
          f"{topics.labels}); the pipeline's doc shards train on it", file=sys.stderr)
    return 0


def _teach_state(path: str, verdicts: dict[str, str]) -> None:
    """Store in the state the model the labels train and every page's verdict, so that
    the events of later batches score pages as `rank` does (engine.spam_model). A state
    a run holds open keeps its model until the next label: the label itself is kept."""
    from ..engine.spam_model import store_labels
    from ..reading.states import open_store
    from .rank import model_of
    from .reading import corpus_of

    try:
        store = open_store(path, must_exist=True)
    except UsageError as exc:
        print(f"streamdet: {exc}: its events keep their model until the next label",
              file=sys.stderr)
        return
    try:
        txn = store.begin()
        store_labels(txn.chunks, model_of(corpus_of(store), verdicts), verdicts)
        txn.commit()
    finally:
        store.close()


def cmd_rank(args: argparse.Namespace) -> int:
    from ..adapters.outputs import json_line
    from ..reading.states import worker_shards
    from .rank import ranking
    from .reading import corpus_of, pipeline_corpus, pipeline_verdicts

    if args.top is not None and args.top < 1:
        raise UsageError(f"--top must be >= 1, got {args.top}")
    states = args.state or [DEFAULT_STATE]
    args.state = states[0]  # the desk is beside the first (or --desk)
    workers = worker_shards(states) is not None
    if workers:
        corpus = pipeline_corpus(states)
    elif len(states) > 1:
        raise UsageError("several --state directories are only for worker states")
    else:
        store = _run_state(states[0])
        try:
            corpus = corpus_of(store)
        finally:
            store.close()
    verdicts = pipeline_verdicts(states) if workers and not args.desk else _verdicts(args)
    rows = ranking(corpus, verdicts)[: args.top]
    out = sys.stdout.buffer
    for r in rows:
        out.write(json_line(r.to_dict()) if args.json else
                  (f"{r.score:.3f}\t{'spam' if r.spam else '-'}\t{r.url}\t"
                   f"{'; '.join(r.why)}\n").encode())
    out.flush()
    return 0


def _verdicts(args: argparse.Namespace) -> dict[str, str]:
    """The newest verdict of each labelled URL, from the desk's labels file if there is
    one (ranking creates no desk)."""
    from ..review.cli import DeskLabels, desk_path
    from .reading import verdicts_of

    desk = desk_path(args)
    if not os.path.exists(os.path.join(desk, "labels.sqlite")):
        return {}
    with DeskLabels(desk) as labels:
        return verdicts_of(labels.current())


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"
