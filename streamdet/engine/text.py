"""Visible text of an HTML page (SPEC §1 "text").

Hidden elements (script, style, noscript, template, head) are dropped. Block elements and
<br> separate words, inline elements do not ("<b>quil</b>ted" is one word). Lexbor
concatenates text nodes without separators, so a space is put in front of every block
tag in the markup before parsing; a regex pass over the bytes is far cheaper than
walking the tree in Python.
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser

HIDDEN = "script, style, noscript, template, head"

BLOCK_TAGS = (
    "address article aside blockquote body br caption center dd details dialog dir div dl dt "
    "fieldset figcaption figure footer form frameset h1 h2 h3 h4 h5 h6 header hgroup hr html "
    "legend li main menu nav ol optgroup option p pre section summary table tbody td tfoot th "
    "thead title tr ul"
).split()

_BLOCK_TAG = re.compile(r"<(/?(?:%s))(?=[\s/>])" % "|".join(BLOCK_TAGS), re.IGNORECASE)


def visible_text(html: str) -> str:
    """The words a reader sees, with block boundaries as spaces."""
    spaced = _BLOCK_TAG.sub(r" <\1", html)
    tree = LexborHTMLParser(spaced)
    for node in tree.css(HIDDEN):
        node.decompose()
    root = tree.root
    if root is None:
        return ""
    return root.text(deep=True, separator="", strip=False)
