"""Deterministic label hygiene shared by every strategy."""

from __future__ import annotations

import re

_WS = re.compile(r"\s+")
_TRAIL = re.compile(r"[\s.;:,!-]+$")


def normalise_label(text: str, limit: int = 120) -> str:
    """Collapse whitespace, drop trailing punctuation, capitalise the first letter; the same text
    always gives the same label so repeated incidents meet on one node."""
    clean = _TRAIL.sub("", _WS.sub(" ", text).strip())
    if not clean:
        return ""
    clean = clean[0].upper() + clean[1:]
    return clean[:limit].rstrip()
