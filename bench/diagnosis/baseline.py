"""The ranking against a naive-Bayes baseline, at 2, 8 and 30 resolved incidents per cause, in one run.

Corpus: `bamboo.samples.generate_incidents` (the same generator as `bench.diagnosis.run`). A fixed held-out
set of three incidents per cause is put aside first; for each size k, the first k incidents per cause of the
rest are learned (and, in a last row, between 1 and 8 per cause, drawn per cause, as a real store holds
common and rare causes) through the real PopulateBatch workflow into a fresh database, and the held-out tasks are
ranked by `AnalysisService.gather_evidence` (no model involved). The baseline is a Bernoulli naive-Bayes
classifier over the very clues analysis extracts (`bamboo.analysis.clues.extract_clues`: symptom classes,
status, task features, context, components) of the same k per cause, with Laplace smoothing; an absent clue
counts as evidence too, which the ranking does not do. Both are scored as accuracy@1 and accuracy@3.

    .venv/bin/python -m bench.diagnosis.baseline
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import shutil
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from bamboo.analysis.clues import extract_clues
from bamboo.analysis.service import AnalysisService
from bamboo.extraction.labels import normalise_label
from bench.diagnosis.learned import command, incidents_by_cause, learned_store, parse_args
from bench.diagnosis.run import Ranked, rank_all, ranking_at
from tests.services import start_stack

HELD_OUT_PER_CAUSE = 3
SIZES = "2,8,30"


def clue_keys(task: dict, pseudonym_key: bytes) -> frozenset[str]:
    return frozenset(f"{c.type}:{c.name}" for c in extract_clues(task, pseudonym_key).clues)


class NaiveBayes:
    """Bernoulli naive Bayes over clue keys: log P(cause) + sum over the vocabulary of log P(present|cause)
    or log P(absent|cause), each with add-one smoothing."""

    def __init__(self, examples: list[tuple[frozenset[str], str]]) -> None:
        self.vocabulary = sorted({k for keys, _ in examples for k in keys})
        self.count = Counter(cause for _, cause in examples)
        self.present: dict[str, Counter] = defaultdict(Counter)
        for keys, cause in examples:
            self.present[cause].update(keys)
        self.total = len(examples)

    def ranked(self, keys: frozenset[str]) -> list[str]:
        scores = {}
        for cause, n in self.count.items():
            score = math.log(n / self.total)
            for k in self.vocabulary:
                p = (self.present[cause][k] + 1) / (n + 2)
                score += math.log(p if k in keys else 1 - p)
            scores[cause] = score
        return sorted(scores, key=lambda c: -scores[c])


def corpus(per_cause: int, seed: int, noise: float):
    """(held-out, pool by cause): the pool holds at least ``per_cause`` incidents of every cause."""
    by_cause = incidents_by_cause(per_cause + HELD_OUT_PER_CAUSE, seed, noise)
    held_out = [i for v in by_cause.values() for i in v[:HELD_OUT_PER_CAUSE]]
    pool = {c: v[HELD_OUT_PER_CAUSE:] for c, v in by_cause.items()}
    return held_out, pool


UNEVEN = (1, 8)  # the uneven row learns between 1 and 8 incidents per cause, drawn per cause


def uneven_counts(causes: list[str], seed: int) -> dict[str, int]:
    """Incidents to learn per cause for the uneven row: real stores hold common and rare causes."""
    rng = random.Random(seed)
    return {c: rng.randint(*UNEVEN) for c in sorted(causes)}


async def measure(k: int | str, pool: dict[str, list], held_out: list, base: Path, stack,
                  per_cause: dict[str, int] | None = None) -> dict:
    train = [i for c, v in pool.items() for i in v[:(per_cause[c] if per_cause else k)]]
    tag = "baseline-uneven" if per_cause else f"baseline-{k}"
    tasks = [dict(i.task_data) for i in held_out]
    truths = [normalise_label(i.resolution_record.cause) for i in held_out]
    async with learned_store(stack, base, tag, train) as learned:
        ranked: list[Ranked] = await rank_all(AnalysisService(learned.services), tasks, truths)
    settings, populated = learned.settings, learned.populated
    key = settings.pseudonym_key.get_secret_value().encode()  # the clue names analysis itself uses
    bayes = NaiveBayes([(clue_keys(dict(i.task_data), key), normalise_label(i.resolution_record.cause)) for i in train])
    guesses = [bayes.ranked(clue_keys(t, key)) for t in tasks]
    return {
        "k": k, "train": len(train), "stored": populated.done, "failed": populated.failed, "populate_s": learned.populate_s,
        "rank1": ranking_at(ranked, 1), "rank3": ranking_at(ranked, 3),
        "nb1": sum(t == g[0] for t, g in zip(truths, guesses)) / len(truths),
        "nb3": sum(t in g[:3] for t, g in zip(truths, guesses)) / len(truths),
        "held_out": len(truths),
    }


async def main(sizes: list[int], seed: int, noise: float) -> str:
    held_out, pool = corpus(max(*sizes, UNEVEN[1]), seed, noise)
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-baseline-"))
    stack = start_stack(base)
    try:
        rows = []
        for k in sizes:
            rows.append(await measure(k, pool, held_out, base, stack))
            print(f"k={k}: ranking @1 {rows[-1]['rank1']:.2f}, naive Bayes @1 {rows[-1]['nb1']:.2f}", file=sys.stderr)
        uneven = f"{UNEVEN[0]}–{UNEVEN[1]} (uneven)"
        rows.append(await measure(uneven, pool, held_out, base, stack, uneven_counts(list(pool), seed)))
    finally:
        stack.stop()
        shutil.rmtree(base, ignore_errors=True)
    run = command("bench.diagnosis.baseline", sizes, SIZES, seed, noise)
    lines = [
        f"Command: {run} (seed {seed}, noise {noise}; {len(pool)} causes, {rows[0]['held_out']} held-out tasks "
        f"({HELD_OUT_PER_CAUSE} per cause, the same for every size); one run, this machine: {os.cpu_count()} cores)",
        "",
        "| incidents per cause | incidents learned | stored | ranking accuracy@1 | ranking accuracy@3 | "
        "naive Bayes accuracy@1 | naive Bayes accuracy@3 | ranking − baseline @1 | populate s |",
        "|---|---|---|---|---|---|---|---|---|",
        *[f"| {r['k']} | {r['train']} | {r['stored']} | {r['rank1']:.2f} | {r['rank3']:.2f} | {r['nb1']:.2f} | "
          f"{r['nb3']:.2f} | {r['rank1'] - r['nb1']:+.2f} | {r['populate_s']:.1f} |" for r in rows],
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(asyncio.run(main(*parse_args(__doc__.split("\n\n")[0], SIZES))))
