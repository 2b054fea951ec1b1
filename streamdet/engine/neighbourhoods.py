"""URL-prefix neighbourhoods and crawler traps (SPEC §8), from a URL's path alone.

Ardi & Heidemann find regions of copied content by URL prefix: for `http://h/a/b/p.html`
the neighbourhoods are `h/`, `h/a/`, `h/a/b/`. A URL whose path repeats one segment three
or more times is a crawler's recursion error (a trap). Both need the path's segments, read
the same way however a URL spells them:

- *The path only.* Query and fragment are not part of it; the host is lower-cased without
  port or credentials (engine.servers.host_of).
- *Percent-encoding.* `%XX` of an unreserved character (`A-Z a-z 0-9 - . _ ~`) is that
  character (RFC 3986 §6.2.2.2); any other escape stays, its hex in upper case. So `%2F`
  is a character of a segment, never a separator: `a%2Fb` is one segment.
- *Dot segments.* `.` is dropped and `..` removes the segment before it, never going above
  the root (RFC 3986 §5.2.4), after decoding (so `%2E%2E` is `..`).
- *Empty segments.* `//` separates like `/`: empty segments are dropped.
- *Directories.* A path that ends with `/` names a directory; otherwise its last segment
  is the page and the others are its directories.
- *Depth.* A page belongs to its host's neighbourhood and to one per directory, the first
  MAX_DEPTH directories at most: a URL of 1,000 segments costs MAX_DEPTH + 1 of them.
"""

from __future__ import annotations

import re
from collections import Counter
from urllib.parse import urlsplit

from .servers import host_of

MAX_DEPTH = 16  # directories a page's neighbourhoods go down (SPEC §8 sets no bound)
TRAP_REPEATS = 3  # one segment this many times in a path: a recursion error (SPEC §8)

_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _unescape(segment: str) -> str:
    """Decode the escapes of unreserved characters; the others in upper case."""
    def one(m: re.Match) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

    return _ESCAPE.sub(one, segment) if "%" in segment else segment


def path_segments(url: str) -> tuple[list[str], bool]:
    """The normalised segments of a URL's path, and whether it names a directory (ends
    with `/`, or with a dot segment, or is empty)."""
    path = urlsplit(url).path
    out: list[str] = []
    directory = True
    for raw in path.split("/"):
        seg = _unescape(raw)
        directory = seg in ("", ".", "..")
        if seg == "..":
            if out:
                out.pop()
        elif seg not in ("", "."):
            out.append(seg)
    return out, directory


def neighbourhoods(url: str) -> list[str]:
    """`host/`, then `host/d1/`, `host/d1/d2/`, ... for the page's directories (at most
    MAX_DEPTH of them)."""
    segments, directory = path_segments(url)
    dirs = segments if directory else segments[:-1]
    host = host_of(url)
    out = [host + "/"]
    for d in dirs[:MAX_DEPTH]:
        out.append(out[-1] + d + "/")
    return out


def trap_segment(url: str) -> tuple[str, int] | None:
    """The path's most repeated segment and its count, when it occurs TRAP_REPEATS times
    or more (a recursion error); else None."""
    segments, _ = path_segments(url)
    if len(segments) < TRAP_REPEATS:
        return None
    segment, n = Counter(segments).most_common(1)[0]
    return (segment, n) if n >= TRAP_REPEATS else None

