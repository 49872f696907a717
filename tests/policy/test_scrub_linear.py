"""Patterns that read untrusted text read it in time linear in its length.

A JWT pattern starting at every "-" of a long run, and a line-break pattern starting at every blank of a long run
of spaces, each scanned the rest of the run from every start: "eyJ-" repeated over a 512 KiB tool result held the
worker's loop for 144 s (``re`` keeps the GIL, so the thread it ran in did not help), and 16,000 spaces in a
request took 4 s on each render of the approvals page. Measured as a ratio in one run: one input eight times as
long against eight inputs of the base length, the same volume of text, so the two take about as long when the
work is linear and eight times as long when it is quadratic; interleaved and best of five, so a loaded machine
slows both alike."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from bamboo.analysis.diagnosis import one_line as one_line_reason
from bamboo.frontends.review import one_line
from policy.scrub import _RULES, scrub_text

GROWTH = 8
LINEAR_ENOUGH = 3.0  # linear: about 1; quadratic: about GROWTH


def _growth(work: Callable[[int], object], size: int) -> float:
    def timed(calls: int, n: int) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            work(n)
        return time.perf_counter() - started

    pieces, whole = [], []
    for _ in range(5):
        pieces.append(timed(GROWTH, size))
        whole.append(timed(1, size * GROWTH))
    return min(whole) / max(min(pieces), 1e-6)


def test_scrubbing_runs_of_jwt_starts_is_linear():
    assert _growth(lambda n: scrub_text("eyJ-" * (n // 4)), 8192) < LINEAR_ENOUGH


def test_collapsing_a_long_run_of_blanks_is_linear():
    assert _growth(lambda n: one_line("a" + " " * n + "b"), 2048) < LINEAR_ENOUGH
    assert _growth(lambda n: one_line_reason("a" + " " * n + "b"), 2048) < LINEAR_ENOUGH


# The single patterns they replace, as the reference for what is found.
_OLD_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")
_OLD_BREAKS = re.compile(r"\s*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+\s*")
_PIECES = st.sampled_from(["eyJ", "eyJhbGci", "-", "_", ".", "a", "Z", "9", "é", " ", "e", "J"])
_BLANK_PIECES = st.sampled_from(["a", " ", "\t", "\n", "\r", "\x1c", "\x1f", "\x85", "\u2028", "\xa0", "\v", "\u3000"])


@settings(max_examples=2000, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_the_jwt_rule_finds_what_the_single_pattern_found(text):
    [jwt] = [rule for rule in _RULES if rule.kind == "jwt"]
    assert list(jwt.spans(text)) == [m.span() for m in _OLD_JWT.finditer(text)]


@settings(max_examples=2000, deadline=None)
@given(st.lists(_BLANK_PIECES, max_size=30).map("".join))
def test_one_line_collapses_what_the_single_pattern_collapsed(text):
    assert one_line(text) == _OLD_BREAKS.sub(" ⏎ ", text.strip())
