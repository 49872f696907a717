"""The ranking and its confidence as they were before clue weights from commonness (commit 2328f8b), kept
only as a recorded comparison: the calibration benchmark scores them beside today's on the same evidence
read from the same store. Nothing in the product imports this.

Every matched clue counted by its share alone, however many stored incidents shared it (vo=atlas as much
as a pilot error code), and the confidence was the top candidate's share of the top two's support: 1.0
for a lone candidate, whatever it rested on.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from bamboo.analysis.contract import Clue
from bamboo.analysis.queries import CauseStats, ClueEdge

UNTIERED_TYPES = frozenset({"status"})
SHRINKAGE = 1
PILOT_CODE = "pilotErrorCode="


@dataclass(frozen=True)
class Answer:
    cause: str | None  # None: "no known cause"
    confidence: float
    ranked: list[str]


def rank(clues: list[Clue], edges: list[ClueEdge], stats: dict[str, CauseStats]) -> list[tuple[str, float, set[str]]]:
    """(cause, support, matched clue names), best first, as rank_candidates ordered them."""
    type_of = {(c.kind, c.name): c.type for c in clues}
    by_cause: dict[str, list[tuple[ClueEdge, str]]] = defaultdict(list)
    for e in edges:
        t = type_of.get((e.clue_kind, e.clue_name))
        if t is not None:
            by_cause[e.cause].append((e, t))
    seen = {cause: stats[cause].incidents if cause in stats and stats[cause].incidents > 0
            else max(max(e.frequency for e, _ in m), 1) for cause, m in by_cause.items()}
    typical = sum(seen.values()) / len(seen) if seen else 1.0
    rows = []
    for cause, matched in by_cause.items():
        s = stats.get(cause, CauseStats(0, 0, 0, 0))
        breadth = len({t for _, t in matched if t not in UNTIERED_TYPES})
        support = round(sum(e.frequency / (e.clue_total + SHRINKAGE) if e.clue_total else 0.0 for e, _ in matched)
                        * typical / seen[cause], 4)
        frequency = max(s.incidents, max(e.frequency for e, _ in matched)) + s.confirmations
        confidence = round(sum(e.confidence for e, _ in matched) / len(matched), 4)
        rows.append((breadth, support, frequency, confidence, cause, {e.clue_name for e, _ in matched}))
    rows.sort(key=lambda r: (-r[0], -r[1], -r[2], -r[3], r[4]))
    return [(r[4], r[1], r[5]) for r in rows[:10]]


def answer(clues: list[Clue], edges: list[ClueEdge], stats: dict[str, CauseStats]) -> Answer:
    ranked = rank(clues, edges, stats)
    names = [r[0] for r in ranked]
    if not ranked:
        return Answer(None, 0.0, names)
    defining = ([c.name for c in clues if c.type == "symptom"]
                + [c.name for c in clues if c.type == "task_feature" and c.name.startswith(PILOT_CODE)])
    matched = set().union(*(r[2] for r in ranked))
    if defining and not matched.intersection(defining):
        return Answer(None, 0.0, names)
    if len(ranked) == 1:
        return Answer(names[0], 1.0, names)
    top, second = ranked[0][1], ranked[1][1]
    return Answer(names[0], 0.5 if top + second <= 0 else round(top / (top + second), 4), names)
