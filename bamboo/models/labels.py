"""When two labels mean the opposite: shared by extraction (a model's re-wording of a reviewed label) and
the store's canonical matching (a stored name that embeds close to a new one)."""

from __future__ import annotations

import re

# Words whose swap turns a name into its opposite while the embedding barely moves ("stage-out" and
# "stage-in" scored 0.937): two names that differ in one of these are never merged, however similar.
OPPOSITES = [("in", "out"), ("input", "output"), ("inbound", "outbound"), ("source", "destination"),
             ("upload", "download"), ("read", "write"), ("enable", "disable"), ("increase", "decrease"),
             ("raise", "lower"), ("add", "remove"), ("start", "stop"), ("before", "after"), ("min", "max"),
             ("success", "failure"), ("expired", "valid"), ("kill", "retry"), ("allow", "deny")]
NEGATIONS = frozenset({"not", "no", "never", "without"})


def _words(name: str) -> set[str]:
    return set(re.findall(r"[a-z]+", name.lower()))


def contradicts(a: str, b: str) -> bool:
    """Whether two names differ in a direction or a negation: the same words otherwise, opposite meaning."""
    wa, wb = _words(a), _words(b)
    for x, y in OPPOSITES:
        if (x in wa and y in wb and y not in wa and x not in wb) or (y in wa and x in wb and x not in wa and y not in wb):
            return True
    return bool(wa & NEGATIONS) != bool(wb & NEGATIONS)
