"""Highlighted code is kept (the review's F7): the console's templates highlight code while a page renders, in the
request handler on the console's event loop, and the live pages render the same code again on every refresh
(64 KiB of edited code: 0.4 s of pygments each time). A refresh must not highlight again; what is kept is bounded.
Structural checks only: how many times pygments ran, never how long it took."""

from __future__ import annotations

from typing import Any

import pytest

from bamboo.frontends.console import render
from bamboo.frontends.console.render import code_html, diff_html


@pytest.fixture
def highlights(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every pygments run, starting from an empty cache."""
    runs: list[str] = []
    real = render.highlight

    def spy(text: str, lexer: Any, formatter: Any) -> str:
        runs.append(text)
        return real(text, lexer, formatter)

    monkeypatch.setattr(render, "highlight", spy)
    cache = getattr(render, "_html", None)
    if cache is not None:
        cache.clear()
    return runs


def test_a_refresh_of_the_same_code_does_not_highlight_it_again(highlights):
    code = "".join(f"x{i} = tools.get_job({i})  # \u200b note\n" for i in range(2000))
    first = code_html(code, {3, 5})
    again = code_html(code, {5, 3})
    assert again == first
    assert len(highlights) == 1, "the same code was highlighted again"
    diff = "--- a\n+++ b\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    assert diff_html(diff) == diff_html(diff)
    assert len(highlights) == 2, "the same diff was highlighted again"


def test_what_is_kept_is_told_apart_by_the_text_its_kind_and_its_flagged_lines(highlights):
    code = "a = 1\nb = 2\nc = 3\n"
    two, three = str(code_html(code, {2})), str(code_html(code, {3}))
    assert '<span class="hll"><span class="linenos">2<' in two and '<span class="linenos">2</span>' in three
    assert '<span class="hll"><span class="linenos">3<' in three
    assert str(code_html(code + "d = 4\n", {2})) != two
    assert 'class="code diff"' in str(diff_html(code)) and 'class="code diff"' not in str(code_html(code))
    assert len(highlights) == 5
    assert str(code_html(code, {2})) == two and len(highlights) == 5


def test_what_is_kept_is_bounded_by_count_and_by_size(highlights, monkeypatch):
    monkeypatch.setattr(render, "CACHE_ENTRIES", 3)
    for i in range(5):
        code_html(f"x = {i}\n")
    assert len(render._html) == 3
    code_html("x = 0\n")  # the least recently used went first: highlighted again
    code_html("x = 4\n")
    assert highlights.count("x = 0\n") == 2 and highlights.count("x = 4\n") == 1

    render._html.clear()
    monkeypatch.setattr(render, "CACHE_ENTRIES", 1000)
    monkeypatch.setattr(render, "CACHE_CHARS", 4_000)
    for i in range(50):
        code_html(f"x = {i}\n")
    kept = list(render._html._pages.values())
    assert sum(len(html) for html in kept) <= 4_000 and 0 < len(kept) < 50
    big = "y = 1\n" * 5000  # its HTML alone is over a quarter of the budget: shown, never kept
    code_html(big), code_html(big)
    assert highlights.count(big) == 2
