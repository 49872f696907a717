"""Condense job logs into what a diagnosis needs: where the payload got to and what it said last.

Pure functions over text, so they are cheap to test and deterministic for the simulator's logs.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

_ERROR_RE = re.compile(r"\b(error|fatal|exception|traceback|killed|abort(ed)?|segmentation|oom|failed)\b", re.I)
_SECTION_RE = re.compile(r"^(={3,}|-{3,}|#{3,}|\*{3,})|\b(step|stage|begin|start(ing)?|running|executing)\b[: ]", re.I)
_TIMESTAMP_RE = re.compile(r"^\s*\[?\d{4}-\d{2}-\d{2}[T ][\d:.,]+\]?\s*|^\s*\d{2}:\d{2}:\d{2}\s*")
_VOLATILE_RE = re.compile(r"0x[0-9a-f]+|\d+(\.\d+)?", re.I)

TAIL_LINES = 50
MAX_ERROR_LINES = 30
FOLLOW_LINES = 150


class LogSummary(BaseModel):
    total_lines: int
    sections: list[str]
    error_lines: list[str]
    last_timestamp: str | None
    last_action: str | None
    tail: list[str]


class LogComparison(BaseModel):
    failed_lines: int
    successful_lines: int
    failed_log_truncated: bool
    diverged_after: str | None
    successful_continuation: list[str]
    failed_tail: list[str]


def summarize_log(text: str) -> LogSummary:
    lines = text.splitlines()
    sections = [ln.strip() for ln in lines if _SECTION_RE.search(ln)][:40]
    errors = [ln.strip() for ln in lines if _ERROR_RE.search(ln)][:MAX_ERROR_LINES]
    last_ts = None
    for ln in reversed(lines):
        match = _TIMESTAMP_RE.match(ln)
        if match:
            last_ts = match.group(0).strip(" []")
            break
    last_action = next((ln.strip() for ln in reversed(lines) if ln.strip()), None)
    return LogSummary(
        total_lines=len(lines),
        sections=sections,
        error_lines=errors,
        last_timestamp=last_ts,
        last_action=last_action,
        tail=lines[-TAIL_LINES:],
    )


def _normalise(line: str) -> str:
    """Drop timestamps and numbers so the same step in two runs compares equal."""
    return _VOLATILE_RE.sub("#", _TIMESTAMP_RE.sub("", line)).strip()


def compare_logs(failed: str, successful: str) -> LogComparison:
    """Align the failed log against a successful one and show what the successful run did next."""
    failed_lines = failed.splitlines()
    ok_lines = successful.splitlines()
    ok_index: dict[str, int] = {}
    for i, ln in enumerate(ok_lines):
        ok_index.setdefault(_normalise(ln), i)
    last_match = -1
    last_text: str | None = None
    for ln in failed_lines:
        key = _normalise(ln)
        pos = ok_index.get(key)
        if key and pos is not None and pos > last_match:
            last_match, last_text = pos, ln.strip()
    continuation = ok_lines[last_match + 1 : last_match + 1 + FOLLOW_LINES] if last_match >= 0 else ok_lines[:FOLLOW_LINES]
    return LogComparison(
        failed_lines=len(failed_lines),
        successful_lines=len(ok_lines),
        failed_log_truncated=last_match + 1 < len(ok_lines) * 0.9,
        diverged_after=last_text,
        successful_continuation=continuation,
        failed_tail=failed_lines[-TAIL_LINES:],
    )
