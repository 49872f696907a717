"""Scrubbing what a sandbox run produced, without stopping the worker while it is done.

A script decides how much it prints (up to the capture cap, 4 MiB a stream) and what: 4 MiB of
secret-shaped lines cost the scrubber 24 s of CPU, and on the event loop that was 134 s without a
heartbeat, a retry that ran the script again, and every other activity of the worker stalled. So
output is scrubbed by size: a few kilobytes at once (cheaper than any hand-off), up to 64 KiB in a
thread (the scrubber's longest C call on that much text is some tens of milliseconds), and anything
larger in a child process (`bamboo.offload`), whose long regular-expression scans cannot hold the
worker's GIL.

Fail closed: output that cannot be scrubbed within the budget (or whose child fails) is withheld, not
shown or stored unscrubbed; the report says so and counts it as one redaction.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from bamboo.offload import BudgetExceeded, ChildFailed, in_child, in_thread
from policy.scrub import scrub_text, scrub_value

log = logging.getLogger(__name__)

INLINE_CHARS = 4096
THREAD_CHARS = 64 * 1024
SCRUB_BUDGET_S = 60.0
WITHHELD = ("[output withheld: it could not be scrubbed for secrets within {budget:g} s ({why}); "
            "print less, or less that looks like credentials]")


async def scrub_output(text: str, *, budget_s: float = SCRUB_BUDGET_S) -> tuple[str, int]:
    """``text`` scrubbed, and how many findings were redacted."""
    if len(text) <= INLINE_CHARS:
        result = scrub_text(text)
        return result.text, len(result.findings)
    try:
        if len(text) <= THREAD_CHARS:
            result = await in_thread(scrub_text, text, budget_s=budget_s, what="scrubbing the output")
            return result.text, len(result.findings)
        raw = await in_child("scrub_text", text.encode("utf-8", "surrogatepass"), budget_s=budget_s,
                             what="scrubbing the output")
        answer = await in_thread(json.loads, raw, budget_s=budget_s, what="reading the scrubbed output")
        return answer["text"], int(answer["findings"])
    except (BudgetExceeded, ChildFailed, ValueError, KeyError, TypeError) as exc:
        log.warning("output of %d characters withheld: %s", len(text), exc)
        return WITHHELD.format(budget=budget_s, why=_why(exc)), 1


async def scrub_returned(value: Any, *, budget_s: float = SCRUB_BUDGET_S) -> tuple[Any, int]:
    """A run's return value (plain JSON data, at most the return cap) scrubbed with its keys; a value
    that cannot be scrubbed in time comes back as ``{"withheld": <why>}``."""
    size = len(json.dumps(value))
    if size <= INLINE_CHARS:
        return scrub_value(value)
    try:
        if size <= THREAD_CHARS:
            return await in_thread(scrub_value, value, budget_s=budget_s, what="scrubbing the return value")
        raw = await in_child("scrub_value", json.dumps(value).encode("ascii"), budget_s=budget_s,
                             what="scrubbing the return value")
        answer = json.loads(raw)
        return answer["value"], int(answer["findings"])
    except (BudgetExceeded, ChildFailed, ValueError, KeyError, TypeError) as exc:
        log.warning("return value of %d bytes withheld: %s", size, exc)
        return {"withheld": WITHHELD.format(budget=budget_s, why=_why(exc))}, 1


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, (BudgetExceeded, ChildFailed)) else f"unreadable answer: {type(exc).__name__}"
