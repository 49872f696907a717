"""Deterministic label hygiene shared by every strategy."""

from __future__ import annotations

import re

from bamboo.models.incident import fold_label, label_script_problem

_WS = re.compile(r"\s+")
_TRAIL = re.compile(r"[\s.;:,!-]+$")


def normalise_label(text: str, limit: int = 120) -> str:
    """Fold to Unicode's compatibility form without format characters (`fold_label`), collapse whitespace,
    drop trailing punctuation, capitalise the first letter; the same text always gives the same label so
    repeated incidents meet on one node.

    "" (no usable label, as for one of only blanks) when a word mixes Latin, Cyrillic or Greek letters
    (`label_script_problem`): "Wаlltime request too short" with a Cyrillic "а" would be a second cause that
    prints as the first. A resolution record with one is refused where it enters (`ResolutionRecord`, one line
    saying which word); a model's wording with one is not used (the record's wording, or "Unknown cause")."""
    folded = fold_label(text)
    if label_script_problem(folded):
        return ""
    clean = _TRAIL.sub("", _WS.sub(" ", folded).strip())
    if not clean:
        return ""
    clean = clean[0].upper() + clean[1:]
    return clean[:limit].rstrip()
