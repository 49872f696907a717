"""Where a populate batch's live progress used to be read; it is ``PopulateClient``'s now
(``bamboo/accumulation/client.py``), kept importable here for the tests and tools that read a batch they
started themselves."""

from __future__ import annotations

from bamboo.accumulation.client import live_progress as live_progress

__all__ = ["live_progress"]
