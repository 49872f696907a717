"""Tell look-alike causes apart: which of two causes that share the task's error symptom makes its clues likelier.

Real PanDA causes often share a symptom class, a pilot error code and sites, and differ only in weaker
evidence: the payload type against the memory request, managed against user tasks, a core count (issue 30).
The ranking's support weighs a clue by how much of *its* evidence points at a cause, so a clue several
causes carry (processingType=reco, prodSourceLabel=managed) adds little to either twin, whatever share of
each twin's own incidents carry it. Between two such causes the question is the other way round: how often
does each of them come with the task's clues? That is a naive-Bayes likelihood over the task's clues,
P(clue | cause) read from the edges already fetched (the incidents of the cause that stored the clue, over
the incidents that stored the cause, smoothed by one on each side), times the cause's incident count. Each
clue's term is weighted by its specificity, as in the support: a clue on most stored incidents (vo=atlas,
prodSourceLabel=managed) says little, and its per-cause counts above a few hundred incidents are estimates
read from a sample (queries.context_edges), which unweighted flipped close calls.

It decides only between the ranking's top two, only when both are linked to every error symptom class of
the task and tie on breadth, and only when the task's pilot error codes do not tell them apart: both are
linked to one of them (each then stored at least MIN_INCIDENTS_SHARED_CODE times), or neither is linked to
any (each stored at least MIN_INCIDENTS times: with only the symptom class shared, the weaker clues need
more incidents to be read from). A frequency read from a handful of incidents is mostly noise.

Measured on the calibration corpus's dumped ranking inputs (bench/diagnosis/calibration.py --dump,
bench/diagnosis/results.md), accuracy@1 on known causes with 30 incidents per cause went 0.79 → 0.82,
0.82 → 0.84 and 0.79 → 0.81 on seeds 30, 31 and 32 (look-alike causes 0.73 → 0.79, 0.85 → 0.88,
0.77 → 0.81), nothing lost elsewhere. Without the shared code it also swapped causes of one symptom class
that the code (or its absence) tells apart: three more tasks gained there, and 2 of 96 lost on the earlier
corpus (bench/diagnosis/baseline.py, 30 per cause). The threshold was chosen on seeds 30 and 31 (before the
code was required): allowed at 8 incidents per cause it lost 2 points and 0 there (and gained 5 on seed 32);
at 2 per cause it lost 4.

The pairs without a shared code, and the lower count for pairs with one, were added later (issue 30, dumped
inputs of seeds 30-35, seed 36 used only to check): known causes @1 pooled over seeds 30-35 went 0.800 →
0.814 at 8 incidents per cause and 0.852 → 0.861 at 30 (look-alike causes 0.750 → 0.774 and 0.857 → 0.875),
2 per cause 0.707 → 0.711, novel-cause tasks unchanged; on seed 36, 0.755 → 0.853 at 8 and 0.873 → 0.863 at
30 (one task). Both lower counts at 5 lost at 8 per cause what they won (0.809); both at 10 gained less (0.807).

Pure, so it is tested without a database.
"""

from __future__ import annotations

import math

from bamboo.analysis.contract import CandidateCause, Clue
from bamboo.analysis.ranked import symptoms_and_codes

# Incidents each of the two causes must have been stored from before their clue frequencies decide: when
# neither is linked to the task's pilot codes, and when both are linked to one of them.
MIN_INCIDENTS = 10
MIN_INCIDENTS_SHARED_CODE = 5


def log_likelihood(candidate: CandidateCause, clue_weights: dict[str, float], incidents: int) -> float:
    """log P(cause) + the sum over the task's clues of weight × log P(clue | cause), up to a constant shared by
    all causes; `clue_weights`: the task's clue names -> their specificity in the store (ranking.specificity)."""
    seen = {m.name: min(m.edge_frequency, incidents) for m in candidate.matched}
    return math.log(incidents) + sum(w * math.log((seen.get(name, 0) + 1) / (incidents + 2))
                                     for name, w in clue_weights.items())


def look_alike(top: CandidateCause, runner_up: CandidateCause, symptoms: set[str], codes: set[str]) -> int | None:
    """The incidents each must have been stored from for their clues to decide, when the two are look-alikes
    (both linked to every error symptom class of the task, on the same breadth, and the task's pilot codes do
    not tell them apart); None when they are not."""
    a, b = {m.name for m in top.matched}, {m.name for m in runner_up.matched}
    if not (top.breadth == runner_up.breadth and symptoms and symptoms <= a and symptoms <= b):
        return None
    if codes & a & b:
        return MIN_INCIDENTS_SHARED_CODE
    if not codes & (a | b):
        return MIN_INCIDENTS
    return None  # one of them showed a code of the task's and the other did not: the code tells them apart


def order_look_alikes(candidates: list[CandidateCause], clues: list[Clue], incidents: dict[str, int],
                      weights: dict[str, float] | None = None) -> list[CandidateCause]:
    """The candidates, with the top two swapped when they are look-alikes and the runner-up makes the task's
    clues likelier (module docstring). `incidents`: cause name -> incidents that stored it; `weights`: clue
    name -> specificity (1.0 for a clue not in it)."""
    if len(candidates) < 2:
        return candidates
    top, runner_up = candidates[0], candidates[1]
    symptoms, codes = symptoms_and_codes(clues)
    needed = look_alike(top, runner_up, set(symptoms), set(codes))
    n_top, n_runner_up = incidents.get(top.name, 0), incidents.get(runner_up.name, 0)
    if needed is None or min(n_top, n_runner_up) < needed:
        return candidates
    names = {c.name: (weights or {}).get(c.name, 1.0) for c in clues}
    if log_likelihood(runner_up, names, n_runner_up) > log_likelihood(top, names, n_top):
        return [runner_up.model_copy(update={"likelier": True}), top, *candidates[2:]]
    return candidates
