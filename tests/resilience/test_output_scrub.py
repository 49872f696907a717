"""Scrubbing by size (`bamboo.output_scrub`): the same redactions whether the text is scrubbed at once,
in a thread or in a child process, and output that cannot be scrubbed in time is withheld, never shown."""

from __future__ import annotations

import pytest

from bamboo.offload import BudgetExceeded, in_child
from bamboo.output_scrub import INLINE_CHARS, THREAD_CHARS, scrub_output, scrub_returned
from policy.scrub import scrub_text, scrub_value

# Built at run time so the repository holds no literal key.
SECRET_LINE = "export AWS_SECRET_ACCESS_KEY=" + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzEXAMPLEKEY" + "\n"
FILLER = "INFO pilot.control.payload event processed\n"


@pytest.mark.parametrize("size", [INLINE_CHARS // 2, THREAD_CHARS // 2, THREAD_CHARS * 4])
async def test_every_size_is_scrubbed_like_the_scrubber_does(size):
    text = (FILLER * (size // len(FILLER)))[: size - len(SECRET_LINE)] + SECRET_LINE
    expected = scrub_text(text)
    shown, hits = await scrub_output(text)
    assert (shown, hits) == (expected.text, len(expected.findings))
    assert "wJalrXUtnFEMI" not in shown and hits >= 1


async def test_output_that_cannot_be_scrubbed_in_time_is_withheld():
    text = SECRET_LINE * (THREAD_CHARS // len(SECRET_LINE) * 4)
    shown, hits = await scrub_output(text, budget_s=0.001)
    assert shown.startswith("[output withheld") and "wJalrXUtnFEMI" not in shown and hits == 1


async def test_a_large_return_value_is_scrubbed_in_a_child():
    value = {"lines": [FILLER] * (THREAD_CHARS // len(FILLER) * 2), "env": {"password": "hunter2"}}
    assert await scrub_returned(value) == scrub_value(value)


async def test_a_child_past_its_budget_is_killed():
    with pytest.raises(BudgetExceeded, match="took longer than"):
        await in_child("scrub_text", ("aws key=" * 1_000_000).encode(), budget_s=0.2, what="scrubbing")
