"""Rank candidate causes from the clue → cause edges, and keep symptoms without a cause as novel leads.

Order: breadth (how many distinct kinds of clue — error symptom, task feature, context, component — point
at the cause), then support, then frequency, then confidence.

The task's status is evidence but not a kind of its own in the breadth: a cause whose stored incidents
never had this task's status (two incidents rarely cover broken, failed and exhausted) would otherwise
lose a whole tier to causes with less support; measured, that was most of the ranking's misses with two
incidents per cause (bench/diagnosis/baseline.py, docs/architecture.md "Ranking").

Support is frequency made relative to the clue and to the cause: for each matched clue, the share of that
clue's stored evidence that points at this cause, shrunk by one observation — ``frequency / (total + 1)``
— so a clue seen once (a user, a site that happened to appear in one incident) weighs half of one seen with
this cause only, every time, across many incidents; the sum is then divided by how many incidents stored
the cause, relative to the typical candidate. A share alone is proportional to the cause's incident count,
so a cause seen six times outweighed one seen twice on every clue they shared, whatever told them apart;
divided by it, support measures how much more often the clues come with this cause than its own base
rate, and how common the cause is decides only among equals (frequency, the next key). Frequency counts
the incidents that stored the cause plus operator confirmations.

Each clue weighs by how specific it is (issue 30): a clue on every stored incident (vo=atlas, a common core
count) says nothing about which cause it is, yet its share counted like a pilot error code's, and two such
clues once named a cause at confidence 1.00. The weight is read from the store's counts at query time
(`ClueCommonness`, kept at write time in node_incidents): log2 of the store's incidents over the clue's,
capped at one — a clue on at most half of the stored incidents weighs fully, one on all of them nothing,
one on 70% about half. Measured on the calibration corpus (bench/diagnosis/calibration.py), a plain IDF
weight on every clue cost four points of accuracy@1 (it weighs random background, a site or a user, more
than a symptom class several causes share); saturating at half of the store leaves the order of specific
clues as it was and silences only the common ones. A clue type gives a breadth tier only through a clue of
at least BREADTH_MIN_WEIGHT, so generic clues cannot put a cause a tier up.

Between two look-alike causes at the top (both linked to the task's error symptoms and one of its pilot
codes, the same breadth, each stored often enough), the one that makes the task's clues likelier goes first
(`look_alikes`): support weighs a clue by its spread over causes, which cannot tell apart two causes that
share it.

A symptom with no known cause is reported as a novel lead and the other clues still rank their causes
(an earlier version returned no graph result at all when one symptom was unknown).
Pure functions of their inputs, so they are tested without a database.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from bamboo.analysis.contract import CandidateCause, Clue, ClueType, MatchedClue, NovelLead, OperatorVerdict
from bamboo.analysis.look_alikes import order_look_alikes
from bamboo.analysis.queries import CauseStats, ClueCommonness, ClueEdge, VerdictEvidence, clue_key


# Clue types that add support but no breadth tier of their own.
UNTIERED_TYPES = frozenset({"status"})
# Observations a clue's share is shrunk by: one, so a clue seen once weighs half.
SHRINKAGE = 1


# A clue on this share of the stored incidents or fewer weighs fully (log2 of the inverse share, capped at 1).
FULL_WEIGHT_SHARE = 0.5
# A clue type counts for breadth only through a clue weighing at least this (on at most ~70% of incidents).
BREADTH_MIN_WEIGHT = 0.5


def specificity(incidents: int, total: int) -> float:
    """How much a clue on `incidents` of the store's `total` stored incidents can tell causes apart: 0 for a
    clue on all of them, 1 for one on at most FULL_WEIGHT_SHARE; 1 when the store's counts are unknown."""
    if total <= 1 or incidents <= 0:
        return 1.0
    share = min(incidents, total) / total
    return round(min(1.0, math.log(1 / share) / math.log(1 / FULL_WEIGHT_SHARE)), 4)


def clue_weights(clues: list[Clue], commonness: ClueCommonness | None) -> dict[tuple[str, str], float]:
    """(kind, name) -> specificity of every clue of the task (1.0 each without counts)."""
    if commonness is None:
        return {(c.kind, c.name): 1.0 for c in clues}
    return {(c.kind, c.name): specificity(commonness.per_clue.get(clue_key(c.kind, c.name), 0), commonness.incidents)
            for c in clues}


def evidence_weight(edge: ClueEdge) -> float:
    """This edge's share of its clue's evidence, shrunk by SHRINKAGE observations."""
    return edge.frequency / (edge.clue_total + SHRINKAGE) if edge.clue_total else 0.0


def rank_candidates(
    clues: list[Clue],
    edges: list[ClueEdge],
    stats: dict[str, CauseStats],
    resolutions: dict[str, list[str]],
    limit: int = 10,
    resolution_incidents: dict[str, dict[str, list[str]]] | None = None,
    commonness: ClueCommonness | None = None,
) -> list[CandidateCause]:
    type_of = {(c.kind, c.name): c.type for c in clues}
    weight = clue_weights(clues, commonness)
    by_cause: dict[str, list[tuple[ClueEdge, ClueType]]] = defaultdict(list)
    for e in edges:
        clue_type = type_of.get((e.clue_kind, e.clue_name))
        if clue_type is not None:
            by_cause[e.cause].append((e, clue_type))

    # The stored incidents: a verdict adds evidence on some clues, it does not make the cause more common
    # (counted in, it diluted all of the corrected cause's other clues). Without stats, the edges say.
    seen = {cause: stats[cause].incidents if cause in stats and stats[cause].incidents > 0
            else max(max(e.frequency for e, _ in matched), 1) for cause, matched in by_cause.items()}
    typical = sum(seen.values()) / len(seen) if seen else 1.0
    candidates = []
    for cause, matched in by_cause.items():
        s = stats.get(cause, CauseStats(0, 0, 0, 0))
        w = [weight.get((e.clue_kind, e.clue_name), 1.0) for e, _ in matched]
        shares = [MatchedClue(type=t, name=e.clue_name, edge_frequency=e.frequency,
                              share=round(e.frequency / e.clue_total, 4) if e.clue_total else 0.0, weight=wi)
                  for (e, t), wi in zip(matched, w)]
        candidates.append(CandidateCause(
            name=cause,
            description=matched[0][0].cause_description,
            breadth=len({t for (_, t), wi in zip(matched, w) if t not in UNTIERED_TYPES and wi >= BREADTH_MIN_WEIGHT}),
            support=round(sum(wi * evidence_weight(e) for (e, _), wi in zip(matched, w)) * typical / seen[cause], 4),
            frequency=max(s.incidents, max(e.frequency for e, _ in matched)) + s.confirmations,
            confidence=round(sum(e.confidence for e, _ in matched) / len(matched), 4),
            confirmations=s.confirmations,
            resolution_success_rate=round(s.proposed_correct / s.proposed, 4) if s.proposed else None,
            matched=sorted(shares, key=lambda m: (-m.share, m.type, m.name)),
            resolutions=resolutions.get(cause, []),
            resolution_incidents=(resolution_incidents or {}).get(cause, {}),
        ))
    candidates.sort(key=lambda c: (-c.breadth, -c.support, -c.frequency, -c.confidence, c.name))
    top = order_look_alikes(candidates[:limit], clues, seen, {name: w for (_, name), w in weight.items()})
    total = sum(c.support for c in top) or 1.0
    for c in top:
        c.score = round(c.support / total, 4)
    return top


def with_verdicts(clues: list[Clue], edges: list[ClueEdge], verdicts: VerdictEvidence) -> list[ClueEdge]:
    """The stored edges plus operator verdicts on tasks that shared a clue with this one.

    A verdict says "for a task with these clues the cause is C, where the analysis proposed P". It counts
    as one more incident linking C to each of those clues that P has no stored evidence for: the clues
    the proposal could not explain are what tell C apart. Counted on every clue (the symptom, the status,
    generic features), a few corrections made C the answer for every task of the symptom class and broke
    more right answers than they fixed (bench/diagnosis/feedback.py). A verdict whose proposal is unknown
    counts for its own task only (operator_first)."""
    linked = {(clue_key(e.clue_kind, e.clue_name), e.cause) for e in edges}
    extra: dict[tuple[str, str], int] = {}
    for key, cause, proposed, n in verdicts.rows:
        if proposed is None or (key, proposed) in linked:
            continue
        extra[(key, cause)] = extra.get((key, cause), 0) + n
    if not extra:
        return edges
    added: dict[str, int] = {}
    for (key, _), n in extra.items():
        added[key] = added.get(key, 0) + n
    description = {e.cause: e.cause_description for e in edges}
    totals = {clue_key(e.clue_kind, e.clue_name): e.clue_total for e in edges}
    merged = [replace(e, frequency=e.frequency + extra.get((clue_key(e.clue_kind, e.clue_name), e.cause), 0),
                      clue_total=e.clue_total + added.get(clue_key(e.clue_kind, e.clue_name), 0)) for e in edges]
    for c in clues:
        key = clue_key(c.kind, c.name)
        for (k, cause), n in sorted(extra.items()):
            if k == key and (key, cause) not in linked:
                merged.append(ClueEdge(c.kind, c.name, cause, description.get(cause, ""), n, 1.0,
                                       totals.get(key, 0) + added[key]))
                linked.add((key, cause))
    return merged


def novel_leads(clues: list[Clue], causes_per_symptom: dict[str, int]) -> list[NovelLead]:
    """Error symptoms the knowledge base has never linked to a cause."""
    leads = []
    for c in clues:
        if c.type != "symptom":
            continue
        known = causes_per_symptom.get(c.name)
        if known is None:
            leads.append(NovelLead(symptom=c.name, description=c.text[:300], reason="symptom never seen before"))
        elif known == 0:
            leads.append(NovelLead(symptom=c.name, description=c.text[:300], reason="symptom seen, but no cause recorded"))
    return leads


def operator_first(candidates: list[CandidateCause], verdict: str | None,
                   kind: OperatorVerdict = "confirmed") -> tuple[list[CandidateCause], str]:
    """An operator's verdict on this very task decides its next analysis: that cause goes first.

    Returns the candidates and a note ("" without a verdict). A verdict naming a cause no clue of the task
    reaches leaves the ranking as it is and says so. The note says what the operator did (`kind`), not
    whether the ranking happens to agree now: a correction that since rose to the top is still a correction."""
    if not verdict:
        return candidates, ""
    chosen = next((c for c in candidates if c.name.lower() == verdict.lower()), None)
    if chosen is None:
        return candidates, f"no candidate is the cause an operator gave for this task ({verdict}); ranking kept"
    said = (f"an operator confirmed {chosen.name} for this task" if kind == "confirmed"
            else f"an operator corrected this task to {chosen.name}")
    if candidates and candidates[0] is chosen:
        return candidates, said
    return [chosen, *[c for c in candidates if c is not chosen]], f"{said}; it is ranked first"
