"""Who may use the review desk: one token (given at start, from a file, or made and
written to a file of its own), or users from a file with scrypt-hashed passwords.

Secrets are compared in constant time and never logged or put in a URL: a browser logs in
with a form (POST) and then holds a signed session cookie; a script sends the token as
`Authorization: Bearer`. Writes from a browser also carry the session's CSRF token
(web.py), which a cross-site page cannot read."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stat
import time
from dataclasses import dataclass, field
from functools import lru_cache

SCRYPT = {"n": 2**14, "r": 8, "p": 1}  # ~50 ms and 16 MB a check: cheap here, dear in bulk
TOKEN_BYTES = 32


class AuthError(ValueError):
    """Credentials that cannot be used (an empty token, a malformed users file)."""


def hash_password(password: str, salt: bytes | None = None) -> str:
    """`scrypt$n$r$p$salt$hash` (base64), for a users file."""
    if not password:
        raise AuthError("an empty password")
    salt = salt or os.urandom(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, dklen=32, **SCRYPT)
    return "$".join(["scrypt", str(SCRYPT["n"]), str(SCRYPT["r"]), str(SCRYPT["p"]),
                     _b64(salt), _b64(digest)])


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        want = base64.b64decode(digest)
        got = hashlib.scrypt(password.encode("utf-8"), salt=base64.b64decode(salt),
                             n=int(n), r=int(r), p=int(p), dklen=len(want))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, want)


MIN_PASSWORD = 12  # characters
# the words most leaked passwords are made of, once digits and signs are taken away
COMMON_WORDS = {"password", "passw", "qwerty", "qwertyuiop", "asdf", "letmein", "welcome",
                "admin", "administrator", "iloveyou", "monkey", "dragon", "abc", "secret",
                "login", "master", "sunshine", "football", "streamdet", "review"}


def weak_password(user: str, password: str) -> str | None:
    """Why `password` is too weak for a reviewer's login (None: it will do): scrypt
    slows a guesser down, it does not save a password on every list of guesses."""
    if len(password) < MIN_PASSWORD:
        return f"a password needs at least {MIN_PASSWORD} characters"
    if len(set(password)) < 5:
        return "a password needs more than a few different characters"
    lowered = password.lower()
    if len(user) >= 3 and user.lower() in lowered:
        return "a password must not hold the user's name"
    letters = "".join(ch for ch in lowered if ch.isalpha())
    if not letters or letters in COMMON_WORDS:
        return "a password must not be a common word with digits or signs around it"
    return None


@lru_cache(maxsize=1)
def _dummy_hash() -> str:
    return hash_password(secrets.token_urlsafe(12))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


@dataclass
class Credentials:
    """A token (who: the name a reviewer gives at login) or users with password hashes."""

    token: str | None = None
    users: dict[str, str] = field(default_factory=dict)
    # the users file, read again when it changes (`review passwd` on a running desk)
    path: str | None = field(default=None, compare=False)
    _stamp: tuple[int, int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if (self.token is None) == (not self.users):
            raise AuthError("give either a token or a users file")
        if self.token is not None and len(self.token) < 16:
            raise AuthError("a token must have at least 16 characters")

    @classmethod
    def from_token_file(cls, path: str) -> Credentials:
        try:
            with open(path, encoding="utf-8") as f:
                return cls(token=f.read().strip())
        except OSError as exc:
            raise AuthError(f"cannot read token file {path}: {exc.strerror}") from None

    @classmethod
    def from_users_file(cls, path: str) -> Credentials:
        """`user:scrypt$...` lines (`streamdet review passwd` writes them); # comments."""
        return cls(users=_read_users(path), path=path, _stamp=_stamp(path))

    def _fresh(self) -> None:
        """The users file as it is now: a password changed or a user removed while the
        desk runs takes effect at once, and ends that reviewer's sessions (`tag`). A file
        that cannot be read now leaves the users as they were."""
        if self.path is None or (stamp := _stamp(self.path)) == self._stamp:
            return
        try:
            self.users, self._stamp = _read_users(self.path), stamp
        except AuthError:
            pass

    def tag(self, who: str) -> str | None:
        """What a session of `who` was opened with, as a digest: the token, or that
        reviewer's password hash (None: no such user now). A session whose tag changed
        has ended (review.sessions)."""
        self._fresh()
        secret = self.token if self.token is not None else self.users.get(who)
        if secret is None:
            return None
        return hashlib.sha256(f"{self.mode}\0{secret}".encode()).hexdigest()[:32]

    @classmethod
    def made_in(cls, path: str) -> Credentials:
        """A new random token written to `path` (mode 0600), or the one already there:
        what the desk uses when given no credentials, so that it never runs open."""
        try:  # O_EXCL: of two desks starting at once, one writes it and both read it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
        except FileExistsError:
            return cls._written(path)
        except OSError as exc:
            raise AuthError(f"cannot make token file {path}: {exc.strerror}") from None
        token = secrets.token_urlsafe(TOKEN_BYTES)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        return cls(token=token)

    @classmethod
    def _written(cls, path: str) -> Credentials:
        """The token in a file another desk may be writing right now (read again for up
        to a second while it is still short)."""
        for _ in range(20):
            try:
                return cls.from_token_file(path)
            except AuthError:
                time.sleep(0.05)
        return cls.from_token_file(path)

    @property
    def mode(self) -> str:
        return "token" if self.token is not None else "users"

    def login(self, name: str, secret: str) -> str | None:
        """The reviewer's name when `secret` is right for `name`, else None."""
        name = name.strip()
        if not name or len(name) > 200:
            return None
        self._fresh()
        if self.token is not None:
            return name if self.bearer(secret) else None
        stored = self.users.get(name)
        if stored is None:
            verify_password(secret, _dummy_hash())  # as long as for a user
            return None
        return name if verify_password(secret, stored) else None

    def bearer(self, token: str) -> bool:
        """Whether `token` is the desk's token (token mode only)."""
        if self.token is None:
            return False
        return hmac.compare_digest(token.encode("utf-8"), self.token.encode("utf-8"))


def _read_users(path: str) -> dict[str, str]:
    users = {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                user, sep, stored = line.partition(":")
                if not sep or not user or not stored.startswith("scrypt$"):
                    raise AuthError(f"{path} line {n}: not 'user:scrypt$...'")
                users[user] = stored
    except OSError as exc:
        raise AuthError(f"cannot read users file {path}: {exc.strerror}") from None
    if not users:
        raise AuthError(f"{path} names no user")
    return users


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size
