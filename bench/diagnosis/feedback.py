"""Feedback that fixes mistakes: a correction on one task, measured on the similar tasks that follow it.

Corpus: `bamboo.samples.generate_incidents`, as in `bench.diagnosis.baseline`: k incidents per cause are
learned through the real PopulateBatch workflow, and six held-out tasks per cause are ranked by
`AnalysisService.gather_evidence` (no model). The held-out tasks of a cause are taken in two halves:
every ranking miss in the first half gets an operator's correction (`record_feedback`, with that task's
clues and the cause the ranking proposed, as `bamboo feedback` stores it); then the second half, which no one corrected, is ranked
again. Reported: the second half's accuracy@1 before and after, how many of its misses were fixed and how
many of its right answers the corrections broke, and whether the corrected tasks themselves now come out
right (they must: a verdict decides its own task).

    .venv/bin/python -m bench.diagnosis.feedback
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bamboo.analysis.contract import Feedback
from bamboo.analysis.feedback import record_feedback
from bamboo.analysis.service import AnalysisService
from bamboo.cli.feedback_cmd import task_clue_keys
from bamboo.extraction.labels import normalise_label
from bench.diagnosis.learned import command, incidents_by_cause, learned_store, parse_args
from tests.services import start_stack

HELD_OUT_PER_CAUSE = 6
SIZES = "2,8"


def corpus(per_cause: int, seed: int, noise: float):
    """(corrected half, later half, learned): per cause, held-out tasks split in two, then k to learn."""
    by_cause = incidents_by_cause(per_cause + HELD_OUT_PER_CAUSE, seed, noise)
    half = HELD_OUT_PER_CAUSE // 2
    first = [i for v in by_cause.values() for i in v[:half]]
    later = [i for v in by_cause.values() for i in v[half:HELD_OUT_PER_CAUSE]]
    learned = [i for v in by_cause.values() for i in v[HELD_OUT_PER_CAUSE:HELD_OUT_PER_CAUSE + per_cause]]
    return first, later, learned


async def top_causes(analysis: AnalysisService, incidents: list) -> list[str | None]:
    out = []
    for incident in incidents:
        evidence = await analysis.gather_evidence(dict(incident.task_data))
        out.append(evidence.candidates[0].name if evidence.candidates else None)
    return out


def truth(incident) -> str:
    return normalise_label(incident.resolution_record.cause)


async def measure(k: int, seed: int, noise: float, base: Path, stack) -> dict:
    first, later, learned = corpus(k, seed, noise)
    async with learned_store(stack, base, f"feedback-{k}", learned) as store:
        analysis = AnalysisService(store.services)
        first_before = await top_causes(analysis, first)
        later_before = await top_causes(analysis, later)
        missed = [(i, top) for i, top in zip(first, first_before) if top != truth(i)]
        corrected = [i for i, _ in missed]
        for incident, proposed in missed:  # the verdict as `bamboo feedback` stores it
            await record_feedback(store.services.store.pool, Feedback(
                task_id=incident.task_data["jediTaskID"], verdict="wrong", cause=truth(incident),
                proposed_cause=proposed, clues=task_clue_keys(store.settings, dict(incident.task_data))))
        first_after = await top_causes(analysis, corrected)
        later_after = await top_causes(analysis, later)
    truths = [truth(i) for i in later]
    before_right = [t == b for t, b in zip(truths, later_before)]
    after_right = [t == a for t, a in zip(truths, later_after)]
    return {
        "k": k, "learned": len(learned), "corrected": len(corrected), "later": len(later),
        "corrected_now_right": sum(truth(i) == a for i, a in zip(corrected, first_after)),
        "before": sum(before_right) / len(later), "after": sum(after_right) / len(later),
        "fixed": sum(a and not b for a, b in zip(after_right, before_right)),
        "broken": sum(b and not a for a, b in zip(after_right, before_right)),
        "misses_before": len(later) - sum(before_right),
    }


async def main(sizes: list[int], seed: int, noise: float) -> str:
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-feedback-"))
    stack = start_stack(base)
    try:
        rows = []
        for k in sizes:
            rows.append(await measure(k, seed, noise, base, stack))
            r = rows[-1]
            print(f"k={k}: {r['corrected']} corrected, later @1 {r['before']:.2f} -> {r['after']:.2f}", file=sys.stderr)
    finally:
        stack.stop()
        shutil.rmtree(base, ignore_errors=True)
    run = command("bench.diagnosis.feedback", sizes, SIZES, seed, noise)
    lines = [
        f"Command: {run} (seed {seed}, noise {noise}; per cause {HELD_OUT_PER_CAUSE // 2} tasks that may be "
        f"corrected and {HELD_OUT_PER_CAUSE // 2} later ones that are not; one run, this machine: "
        f"{os.cpu_count()} cores)",
        "",
        "| incidents per cause | ranking misses corrected | corrected tasks now right | later tasks | "
        "later accuracy@1 before → after | later misses fixed | later right answers broken |",
        "|---|---|---|---|---|---|---|",
        *[f"| {r['k']} | {r['corrected']} | {r['corrected_now_right']}/{r['corrected']} | {r['later']} | "
          f"{r['before']:.2f} → {r['after']:.2f} | {r['fixed']} of {r['misses_before']} | {r['broken']} |"
          for r in rows],
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(asyncio.run(main(*parse_args(__doc__.split("\n\n")[0], SIZES))))
