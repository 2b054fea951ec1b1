"""Markup bounded before the parser (engine.markup_guard, SPEC §9 "bounded analysis").

- Nesting past MAX_DEPTH is read as text of the ancestor at MAX_DEPTH: checked against
  a reference written from the SPEC's sentence for nested block elements.
- Every real page of the tests' slice of the corpus (tests/data) is passed through
  unchanged (the guard changes nothing a crawler would see on a real site).
- Hostile shapes come out in a form the parser builds in linear time: checked on the
  tree lexbor builds from the bounded markup (its depth, its element count against the
  input's tags), never on timings.
"""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborDocumentOptions, LexborHTMLParser

from streamdet.engine.markup_guard import MAX_DEPTH, MAX_ELEMENTS, bounded_html
from streamdet.engine.text import visible_text
from streamdet.engine.tokens import tokenize

from .cli_helpers import PAGES


def tree_shape(html: bytes) -> tuple[int, int]:
    """(depth, elements) of the tree lexbor builds: html is depth 1."""
    tree = LexborHTMLParser(html, scripting=True, options=LexborDocumentOptions.WO_EVENTS)
    deepest = elements = 0
    stack = [(tree.root, 1)]
    while stack:
        node, depth = stack.pop()
        elements += 1
        deepest = max(deepest, depth)
        child = node.child
        while child is not None:
            if child.is_element_node:
                stack.append((child, depth + 1))
            child = child.next
    return deepest, elements


def reference_nested_blocks(words: list[str], block: str = "div") -> list[str]:
    """SPEC §9 for `<block>w1<block>w2...</block>...`: the block at nesting level d holds
    word d-2 (html is level 1, body 2); blocks deeper than MAX_DEPTH are read as text of
    the block at MAX_DEPTH, so their words run into its word with no boundary."""
    kept = MAX_DEPTH - 2
    tokens = [w.casefold() for w in words[:kept - 1]]
    if len(words) >= kept:
        tokens.append("".join(words[kept - 1:]).casefold())
    return tokens


@pytest.mark.parametrize("levels", [10, 509, 510, 511, 600, 5000])
@pytest.mark.parametrize("block", ["div", "blockquote", "section"])
def test_nesting_past_the_cap_is_text_of_the_ancestor(levels, block):
    words = [f"w{i}" for i in range(1, levels + 1)]
    html = "".join(f"<{block}>{w}" for w in words) + f"</{block}>" * levels
    assert tokenize(visible_text(html)) == reference_nested_blocks(words, block)


def test_unclosed_nesting_and_the_text_after_it():
    words = [f"w{i}" for i in range(1, 1001)]
    html = "<p>before</p>" + "".join(f"<div>{w}" for w in words)
    assert tokenize(visible_text(html)) == ["before", *reference_nested_blocks(words)]


def test_script_past_the_cap_is_read_as_text():
    html = "<div>" * 600 + "<script>var x = '<b>bold</b>';</script>" + "</div>" * 600
    text = visible_text(html)
    assert "var x" in text and "<b>bold</b>" in text  # escaped, not markup


def test_real_pages_pass_unchanged():
    with gzip.open(PAGES, "rt", encoding="utf-8") as f:
        pages = [json.loads(line)["html"].encode("utf-8", "ignore") for line in f]
    assert len(pages) >= 250  # the whole slice, not a few of its pages
    changed = [i for i, page in enumerate(pages) if bounded_html(page) is not page]
    assert changed == []


def _hostile(n: int) -> dict[str, str]:
    """Shapes that make lexbor quadratic (or worse) without the guard."""
    return {
        "nested divs": "<div>" * n + "x" + "</div>" * n,
        "unclosed divs": "<div>x" * n,
        "formatting with attributes": "".join(f"<b id={i}>" for i in range(n)) + "x",
        "re-created formatting (li)": "".join(f"<li><b id={i}>x" for i in range(n)),
        "re-created formatting (p)": "".join(f"<p><b id={i}>x" for i in range(n)),
        "formatting closed by a block": "".join(f"<div><b id={i}></div>x" for i in range(n)),
        "ignored end tags": "<div><object></div></object>" * n + "x",
        "stray end tags": "<div></i>" * n + "x",
        "nested tables": "<table><tr><td>" * n + "x",
        "cells straight in tables": "<table><td>" * n + "x",
        "nested lists": "<ul><li>" * n + "x",
        "fieldsets": "<fieldset>" * n + "x",
        "text in tables": "<table>" + "x<div>" * n,
        "svg breakouts": "<svg>" + "<g><div>" * n,
        "foreign self-closing": "<svg>" + "<g><path d='M0 0'/>" * n,
        "attribute flood": "<div " + " ".join(f"a{i}=1" for i in range(n * 4)) + ">x",
        "merged root attributes": "".join(f"<html a{i}=1>" for i in range(n)),
        "options": "<select>" + "<option>x" * n,
        "commented nesting": "<!--" + "<div>" * n + "-->" + "<div>x" * 10,
    }


@pytest.mark.parametrize("shape", sorted(_hostile(10)))
def test_hostile_shapes_are_bounded(shape):
    html = _hostile(4000)[shape].encode()
    bounded = bounded_html(html)
    depth, elements = tree_shape(bounded)
    tags = html.count(b"<") + 8
    assert depth <= MAX_DEPTH + 40, shape  # the cap, plus re-created formatting elements
    assert elements <= 4 * tags, shape  # no element explosion: linear in the input
    visible_text(html.decode())  # and the whole analysis of it goes through


@pytest.mark.parametrize("unit", ["<div>x</div>", "<br>", "<li><b id=1>x", "<option>x",
                                  "<svg><path/></svg>", "</br>"])
def test_elements_past_the_budget_are_read_as_text(unit):
    """A flat page of tags (linear for the parser, but a million elements: seconds of tree
    building and text extraction) keeps its first MAX_ELEMENTS elements; the rest is
    text of their parent: every `x` stays visible."""
    html = ("<select>" if unit == "<option>x" else "") + unit * (MAX_ELEMENTS + 5000)
    bounded = bounded_html(html.encode())
    depth, elements = tree_shape(bounded)
    assert elements <= 3 * MAX_ELEMENTS + 16, unit
    assert visible_text(bounded.decode()).count("x") == html.count("x"), unit
    if unit in ("<div>x</div>", "<br>"):  # well under the budget: unchanged
        under = unit * (MAX_ELEMENTS // 4)
        assert bounded_html(under.encode()) == under.encode()


@given(st.lists(st.sampled_from([
    "<div>", "</div>", "<p>", "</p>", "<li>", "</li>", "<b id=1>", "<b id=2>", "</b>",
    "<i>", "</i>", "<a href=x>", "</a>", "<table>", "</table>", "<tr>", "<td>", "</td>",
    "<svg>", "</svg>", "<g>", "<path/>", "<math>", "<mi>", "<select>", "<option>",
    "<object>", "</object>", "<template>", "</template>", "<script>x<y</script>",
    "<!-- c -->", "<font color=red>", "<br>", "text ", "<h1>", "</h2>", "<nobr>",
    "<form>", "</form>", "<button>", "<dd>", "<dt>", "<span>", "</span>",
]), min_size=0, max_size=3000))
@settings(max_examples=150, deadline=None)
def test_any_tag_soup_comes_out_bounded(parts):
    """The rewrite keeps the parser's tree within the cap (plus re-created formatting
    elements) and its size linear, whatever the mix of tags."""
    html = "".join(parts * 3).encode()
    depth, elements = tree_shape(bounded_html(html))
    assert depth <= MAX_DEPTH + 40
    assert elements <= 4 * (html.count(b"<") + 8)
