"""Bounded capture of a child's stdout/stderr, and the short preview the model is shown.

The parent keeps reading a stream until it closes so the child never blocks on a full pipe, keeps at
most ``capture_bytes`` (the full transcript that goes to a blob) and raises a flag when the child
goes past it, so the runner can kill a script that prints gigabytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

CHUNK = 64 * 1024


class CappedStream:
    def __init__(self, capture_bytes: int, on_overflow: Callable[[], None]) -> None:
        self.capture_bytes = capture_bytes
        self.data = bytearray()
        self.total = 0
        self.overflowed = False
        self._on_overflow = on_overflow

    async def drain(self, reader: asyncio.StreamReader | None) -> None:
        if reader is None:
            return
        while True:
            chunk = await reader.read(CHUNK)
            if not chunk:
                return
            self.total += len(chunk)
            room = self.capture_bytes - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if self.total > self.capture_bytes and not self.overflowed:
                self.overflowed = True
                self._on_overflow()

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def preview(text: str, limit_bytes: int) -> tuple[str, bool]:
    """Head and tail of the text within about ``limit_bytes``; tracebacks live at the end, headers at the start."""
    raw = text.encode("utf-8")
    if len(raw) <= limit_bytes:
        return text, False
    head_budget = (limit_bytes * 3) // 4
    tail_budget = limit_bytes - head_budget
    head = raw[:head_budget].decode("utf-8", errors="ignore")
    tail = raw[-tail_budget:].decode("utf-8", errors="ignore")
    omitted = len(raw) - head_budget - tail_budget
    return f"{head}\n…[{omitted} bytes omitted; the full output is stored]…\n{tail}", True
