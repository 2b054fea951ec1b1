"""Which "server" a document lives on, for the foreign-source rule (SPEC §1 "server").

`domain` is the registered domain by the Public Suffix List with its private section, read
from the snapshot bundled with tldextract (never fetched at run time), so each
`*.blogspot.com` or `*.github.io` site is a server of its own. Hosts with no registered
domain (IP literals, `localhost`) are their own server.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit


@lru_cache(maxsize=1)
def _extractor():
    """The Public Suffix List reader, made at the first registered domain asked (its import
    takes ~0.12 s, which a command that reads no URL, `sites`, need not pay).
    suffix_list_urls=() and no cache dir: only the bundled snapshot, no network, no disk."""
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None,
                                 include_psl_private_domains=True)


@lru_cache(maxsize=1 << 14)
def host_of(url: str) -> str:
    """Lower-cased host name of an absolute URL, without port or credentials. Cached:
    a batch names the hosts of the documents it changed, most of them changed before."""
    return (urlsplit(url).hostname or "").rstrip(".").lower()


@lru_cache(maxsize=1 << 16)
def registered_domain(host: str) -> str:
    """eTLD+1 of a host (private PSL section included); the host itself when there is none."""
    return _extractor()(host).top_domain_under_public_suffix or host


def server_of(url: str, ip: str | None, foreign: str) -> str:
    """The server key of a document; "" under foreign=none (every document is foreign)."""
    if foreign == "none":
        return ""
    host = host_of(url)
    if foreign == "host":
        return host
    if foreign == "ip":
        return ip.strip() if ip else host
    return registered_domain(host)
