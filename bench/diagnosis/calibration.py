"""Look-alike causes, abstention and calibration of the ranking's answer, before and after, in one run.

Corpus: `bench.diagnosis.corpus` (look-alike causes, job records on most tasks, noisy defining fields, a
long tail of causes learned once, and ~18% held-out tasks whose cause the store never saw). For each size
(incidents learned per known cause; tail causes once) a fresh database learns them through the real
PopulateBatch workflow, and every held-out task is diagnosed from its task fields alone:

* **after** — today's product: `AnalysisService.gather_evidence` then `ranking_diagnosis` (the answer
  the analysis gives first, with no model);
* **before** — the ranking and confidence as committed before this change (`previous_ranking`), on the
  evidence the same store returns for the same task;
* **after + scripted model** — the after answer once the scripted `capable` model's second opinion is
  judged (`bench.diagnosis.scripted_models`: it reads the very prompt the product sends and overrides on
  distinctive clues; `bamboo.analysis.override.judge` decides whether that may move the answer), called in
  process rather than over HTTP and Temporal, which the model harness (`bench.diagnosis.run`) covers.

What the clues allow: a Bernoulli naive Bayes (`bench.diagnosis.baseline`, absent clues counted too) over
the same clues, learned from the same incidents as each store, and from CEILING_PER_CAUSE incidents of every
known cause drawn from the same generator with another seed. The latter is roughly the corpus's ceiling: with
look-alike causes told apart by a field or two and noise in those fields, some tasks look more like the twin
than like their own cause whatever learns them.

Scored: accuracy@1 on known-cause tasks and on the look-alike causes' tasks, abstention ("no known cause")
on novel-cause tasks and on the others, and calibration of the confidence of every named cause (novel
tasks answered with a cause count as wrong): expected calibration error over ten equal bins, the Brier
score, and a reliability table pooled over sizes.

    .venv/bin/python -m bench.diagnosis.calibration
    .venv/bin/python -m bench.diagnosis.calibration --seeds 30,31,32,33,34,35,36
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bamboo.analysis import queries
from bamboo.analysis.clues import extract_clues
from bamboo.analysis.diagnosis import prompt
from bamboo.analysis.override import ModelAnswer, judge
from bamboo.analysis.ranked import ranking_diagnosis
from bamboo.analysis.ranking import with_verdicts
from bamboo.analysis.service import AnalysisService
from bench.diagnosis import previous_ranking
from bench.diagnosis.baseline import NaiveBayes, clue_keys
from bench.diagnosis.corpus import Corpus, build
from bench.diagnosis.learned import learned_store, scratch_stack, whole_numbers
from bench.diagnosis.scripted_models import capable_diagnosis
from tests.support.scripted_llm import ChatRequest

SIZES = "2,8,30"
SEED = 32
BINS = 10
# Incidents per known cause the ceiling's classifier learns (module docstring).
CEILING_PER_CAUSE = 300
# Pseudonyms only need to be consistent within the classifiers' own clue extraction.
NB_PSEUDONYM_KEY = b"calibration-naive-bayes"


@dataclass(frozen=True)
class Scored:
    size: int
    truth: str
    novel: bool
    lookalike: bool
    cause: str | None  # None: "no known cause"
    confidence: float

    @property
    def right(self) -> bool:
        return self.cause is None if self.novel else self.cause == self.truth


def second_opinion(evidence):
    """The diagnosis once the scripted capable model's answer to the product's own prompt is judged."""
    if not evidence.candidates:
        return ranking_diagnosis(evidence)
    request = ChatRequest(0, {"messages": [{"role": "user", "content": prompt(evidence, {})}]})
    return judge(evidence, ModelAnswer.model_validate(capable_diagnosis(request)))


async def diagnose_all(corpus: Corpus, size: int, base: Path, stack,
                       dump: list | None) -> tuple[list[Scored], list[Scored], list[Scored], float]:
    async with learned_store(stack, base, f"calibration-{size}", corpus.learn(size)) as learned:
        services = learned.services
        analysis = AnalysisService(services)
        pool = services.store.pool
        key = learned.settings.pseudonym_key.get_secret_value().encode()
        before, after, model = [], [], []
        started = time.perf_counter()
        for task, truth, novel, look in zip(corpus.held_out, corpus.truth, corpus.novel, corpus.lookalike):
            fields = dict(task.task_data)
            evidence = await analysis.gather_evidence(fields)
            d = ranking_diagnosis(evidence)
            after.append(Scored(size, truth, novel, look, None if d.is_novel else d.root_cause, d.confidence))
            m = second_opinion(evidence)
            model.append(Scored(size, truth, novel, look, None if m.is_novel else m.root_cause, m.confidence))
            clues = extract_clues(fields, key).clues
            edges = await queries.clue_edges(pool, clues) + await queries.context_edges(pool, clues)
            edges = with_verdicts(clues, edges, await queries.verdict_evidence(pool, clues))
            stats = await queries.cause_stats(pool, sorted({e.cause for e in edges}))
            old = previous_ranking.answer(clues, edges, stats)
            before.append(Scored(size, truth, novel, look, old.cause, old.confidence))
            if dump is not None:
                common = await queries.clue_commonness(pool, clues)
                dump.append({"size": size, "truth": truth, "novel": novel, "lookalike": look,
                             "clues": [c.model_dump() for c in clues], "edges": [asdict(e) for e in edges],
                             "stats": {k: asdict(v) for k, v in stats.items()},
                             "incidents": common.incidents, "per_clue": common.per_clue,
                             "evidence": evidence.model_dump(mode="json")})
        per_task = (time.perf_counter() - started) / len(corpus.held_out)
    return before, after, model, per_task


def share(rows: list[Scored], pick, what) -> str:
    chosen = [r for r in rows if pick(r)]
    return f"{sum(what(r) for r in chosen) / len(chosen):.2f}" if chosen else "—"


def named(rows: list[Scored]) -> list[Scored]:
    return [r for r in rows if r.cause is not None]


def ece(rows: list[Scored]) -> float:
    answered = named(rows)
    if not answered:
        return 0.0
    total = 0.0
    for b in range(BINS):
        inside = [r for r in answered if min(int(r.confidence * BINS), BINS - 1) == b]
        if inside:
            gap = abs(sum(r.confidence for r in inside) / len(inside) - sum(r.right for r in inside) / len(inside))
            total += gap * len(inside) / len(answered)
    return total


def brier(rows: list[Scored]) -> float:
    answered = named(rows)
    return sum((r.confidence - r.right) ** 2 for r in answered) / len(answered) if answered else 0.0


def summary_row(label: str, size: str, rows: list[Scored]) -> str:
    return (f"| {label} | {size} | {share(rows, lambda r: not r.novel, lambda r: r.right)} | "
            f"{share(rows, lambda r: r.lookalike, lambda r: r.right)} | "
            f"{share(rows, lambda r: r.novel, lambda r: r.cause is None)} | "
            f"{share(rows, lambda r: not r.novel, lambda r: r.cause is None)} | "
            f"{ece(rows):.3f} | {brier(rows):.3f} | {len(named(rows))} |")


def reliability(label: str, rows: list[Scored]) -> list[str]:
    answered = named(rows)
    out = []
    for b in range(BINS):
        inside = [r for r in answered if min(int(r.confidence * BINS), BINS - 1) == b]
        if inside:
            out.append(f"| {label} | {b / BINS:.1f}–{(b + 1) / BINS:.1f} | {len(inside)} | "
                       f"{sum(r.confidence for r in inside) / len(inside):.2f} | "
                       f"{sum(r.right for r in inside) / len(inside):.2f} | "
                       f"{sum(r.novel for r in inside)} |")
    return out


def naive_bayes_accuracy(examples: list[tuple[frozenset[str], str]], corpus: Corpus) -> tuple[float, float]:
    """(accuracy@1 on known-cause tasks, on look-alike causes' tasks) of naive Bayes learned from `examples`."""
    right = naive_bayes_right(examples, corpus)
    look = [r for r, lk in zip(right, (lk for lk, novel in zip(corpus.lookalike, corpus.novel) if not novel)) if lk]
    return sum(right) / len(right), sum(look) / len(look)


def naive_bayes_right(examples: list[tuple[frozenset[str], str]], corpus: Corpus) -> list[bool]:
    """Per known-cause held-out task of ``corpus`` (in order): whether naive Bayes learned from ``examples`` names it."""
    nb = NaiveBayes(examples)
    return [nb.ranked(clue_keys(i.task_data, NB_PSEUDONYM_KEY))[0] == t
            for i, t, novel in zip(corpus.held_out, corpus.truth, corpus.novel) if not novel]


def store_examples(corpus: Corpus, size: int) -> list[tuple[frozenset[str], str]]:
    """The naive Bayes's examples a store of ``size`` incidents per cause learns (tail causes once)."""
    return [(clue_keys(i.task_data, NB_PSEUDONYM_KEY), cause) for cause, incidents in corpus.train.items()
            for i in incidents[:1 if cause in corpus.tail else size]]


def fresh_examples(seed: int) -> list[tuple[frozenset[str], str]]:
    """CEILING_PER_CAUSE fresh incidents of every known cause, from the generator with ``seed``."""
    return [(clue_keys(i.task_data, NB_PSEUDONYM_KEY), cause) for cause, incidents
            in build(seed, CEILING_PER_CAUSE).train.items() for i in incidents]


def naive_bayes_rows(corpus: Corpus, sizes: list[int], seed: int) -> list[str]:
    """The table of what a naive Bayes over the same clues reaches: per store, and at the corpus's ceiling."""
    lines = [
        "What the clues allow: a Bernoulli naive Bayes over the same clues (never abstains; known-cause tasks only):",
        "",
        "| classifier | incidents per known cause | accuracy@1 known causes | accuracy@1 look-alike causes |",
        "|---|---|---|---|",
    ]
    for size in sizes:
        known, look = naive_bayes_accuracy(store_examples(corpus, size), corpus)
        lines.append(f"| naive Bayes on the store's incidents | {size} (tail causes 1) | {known:.2f} | {look:.2f} |")
    known, look = naive_bayes_accuracy(fresh_examples(seed + 1), corpus)
    lines.append(f"| naive Bayes on {CEILING_PER_CAUSE} fresh incidents of every known cause (the ceiling, roughly) | "
                 f"{CEILING_PER_CAUSE} | {known:.2f} | {look:.2f} |")
    return lines


async def evaluate(corpus: Corpus, sizes: list[int], base: Path, stack,
                   dump: list | None) -> tuple[list[Scored], list[Scored], list[Scored], dict[int, float]]:
    """Every size's store learned and every held-out task diagnosed: (before, after, after + model, timing)."""
    before: list[Scored] = []
    after: list[Scored] = []
    model: list[Scored] = []
    timing = {}
    for size in sizes:
        b, a, m, per_task = await diagnose_all(corpus, size, base, stack, dump)
        before += b
        after += a
        model += m
        timing[size] = per_task
        print(f"size {size}: known @1 {share(b, lambda r: not r.novel, lambda r: r.right)} -> "
              f"{share(a, lambda r: not r.novel, lambda r: r.right)}", file=sys.stderr, flush=True)
    return before, after, model, timing


async def main(sizes: list[int], seed: int, dump_path: Path | None) -> str:
    corpus = build(seed, max(sizes))
    dump: list | None = [] if dump_path else None
    with scratch_stack("bamboo-bench-calibration-") as (base, stack):
        before, after, model, timing = await evaluate(corpus, sizes, base, stack, dump)
    if dump_path and dump is not None:
        dump_path.write_text(json.dumps(dump))
    n, novel = len(corpus.held_out), sum(corpus.novel)
    command = ("`.venv/bin/python -m bench.diagnosis.calibration" + ("" if ",".join(map(str, sizes)) == SIZES
               else f" --sizes {','.join(map(str, sizes))}") + ("" if seed == SEED else f" --seed {seed}") + "`")
    lines = [
        f"Command: {command} (seed {seed}; {len(corpus.train)} known causes, {sum(corpus.lookalike) // 3} of them "
        f"look-alikes in pairs, {len(corpus.tail)} learned once at every size; {n} held-out tasks, {novel} of them "
        f"({novel / n:.0%}) of 6 causes the store never saw; the ranking alone, and with the scripted model's "
        f"second opinion; one run, this machine: "
        f"{os.cpu_count()} cores)",
        "",
        "| ranking | incidents per known cause | accuracy@1 known causes | accuracy@1 look-alike causes | "
        "novel-cause tasks answered \"no known cause\" | known-cause tasks answered \"no known cause\" | "
        "ECE (named causes) | Brier | causes named |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, rows in (("before", before), ("after", after), ("after + scripted model", model)):
        for size in sizes:
            lines.append(summary_row(label, str(size), [r for r in rows if r.size == size]))
        lines.append(summary_row(label, "all sizes", rows))
    lines += ["", *naive_bayes_rows(corpus, sizes, seed)]
    lines += [
        "",
        "Reliability of the confidence of every named cause, all sizes pooled (a novel-cause task answered with "
        "a cause is wrong):",
        "",
        "| ranking | confidence bin | answers | mean confidence | share right | of them novel-cause tasks |",
        "|---|---|---|---|---|---|",
        *reliability("before", before),
        *reliability("after", after),
        *reliability("after + scripted model", model),
        "",
        "Evidence and ranking per task, mean: " + ", ".join(f"{s} per cause {t * 1000:.0f} ms" for s, t in timing.items())
        + " (the after path; the before one reads its evidence again).",
    ]
    return "\n".join(lines) + "\n"


KINDS = ("look-alike", "learned once (tail)", "other")


def kind_of(corpus: Corpus, truth: str, lookalike: bool) -> str:
    """Which kind of known cause a held-out task's is: a look-alike, one the store learned once, or another."""
    return KINDS[0] if lookalike else KINDS[1] if truth in corpus.tail else KINDS[2]


def by_kind_rows(corpora: dict[int, Corpus], rows: dict[int, list[Scored]], size: int) -> list[str]:
    """Known-cause accuracy@1 per kind of cause at ``size``, pooled over the seeds: the ranking, and what a naive
    Bayes over the same clues reaches from the store's own incidents and from CEILING_PER_CAUSE fresh ones of
    every cause (roughly what the clues allow)."""
    tally: dict[tuple[str, str], list[bool]] = {}
    for seed, corpus in corpora.items():
        known = [(t, look) for t, novel, look in zip(corpus.truth, corpus.novel, corpus.lookalike) if not novel]
        scored = [r for r in rows[seed] if r.size == size and not r.novel]
        if [r.truth for r in scored] != [t for t, _ in known]:
            raise RuntimeError(f"seed {seed}: the scored tasks are not the corpus's held-out tasks in order")
        ranking = [r.right for r in scored]
        store = naive_bayes_right(store_examples(corpus, size), corpus)
        ceiling = naive_bayes_right(fresh_examples(seed + 1), corpus)
        for (truth, look), *right in zip(known, ranking, store, ceiling):
            for who, r in zip(("ranking", "store", "ceiling"), right):
                tally.setdefault((kind_of(corpus, truth, look), who), []).append(r)
    lines = [
        f"Known causes by kind at {size} incidents per cause, pooled over the seeds: the ranking against a naive "
        f"Bayes over the same clues (absent clues counted) learned from the store's own incidents, and from "
        f"{CEILING_PER_CAUSE} fresh incidents of every known cause (roughly what the clues allow):",
        "",
        "| kind of known cause | tasks | ranking | naive Bayes, the store's incidents | naive Bayes, "
        f"{CEILING_PER_CAUSE} per cause |",
        "|---|---|---|---|---|",
    ]
    for kind in KINDS:
        got = [tally.get((kind, who), []) for who in ("ranking", "store", "ceiling")]
        lines.append(f"| {kind} | {len(got[0])} | " + " | ".join(f"{sum(g) / len(g):.2f}" if g else "—" for g in got)
                     + " |")
    return lines


async def across_seeds(sizes: list[int], seeds: list[int]) -> str:
    """Today's ranking (the after rows) on the corpus of each seed in turn, then pooled over the seeds: one
    seed's 24 novel-cause tasks come from six causes, and its ~100 named answers per size leave the ECE of one
    size noisy (a perfectly calibrated answer scores about 0.06 on that many), so per-size figures are read
    pooled."""
    rows: dict[int, list[Scored]] = {}
    corpora: dict[int, Corpus] = {}
    model: list[Scored] = []
    with scratch_stack("bamboo-bench-calibration-") as (base, stack):
        for seed in seeds:
            print(f"seed {seed}", file=sys.stderr, flush=True)
            corpora[seed] = build(seed, max(sizes))
            # A folder per seed: the incidents written for one seed's store must not be learned by the next's.
            _, rows[seed], judged, _ = await evaluate(corpora[seed], sizes, base / f"seed-{seed}", stack, None)
            model += judged
    pooled = [r for seed in seeds for r in rows[seed]]
    lines = [
        f"Command: `.venv/bin/python -m bench.diagnosis.calibration --seeds {','.join(map(str, seeds))}"
        + ("" if ",".join(map(str, sizes)) == SIZES else f" --sizes {','.join(map(str, sizes))}")
        + "` (today's ranking alone, then with the scripted capable model's second opinion as judged; each seed's "
        f"corpus learned at {', '.join(map(str, sizes))} incidents per known cause; one run, this machine: "
        f"{os.cpu_count()} cores)",
        "",
        "| seed | incidents per known cause | accuracy@1 known causes | accuracy@1 look-alike causes | "
        "novel-cause tasks answered \"no known cause\" | known-cause tasks answered \"no known cause\" | "
        "ECE (named causes) | Brier | causes named |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for seed in seeds:
        lines.append(summary_row(str(seed), "all sizes", rows[seed]))
    for size in sizes:
        lines.append(summary_row("all seeds", str(size), [r for r in pooled if r.size == size]))
    lines.append(summary_row("all seeds", "all sizes", pooled))
    for size in sizes:
        lines.append(summary_row("all seeds, after the scripted model's second opinion", str(size),
                                 [r for r in model if r.size == size]))
    lines.append(summary_row("all seeds, after the scripted model's second opinion", "all sizes", model))
    lines += ["", *by_kind_rows(corpora, rows, max(sizes))]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=SIZES, help="incidents per known cause to learn, comma-separated")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--seeds", help="several seeds, comma-separated: today's ranking on each, then pooled "
                                    "(per store size) over them; instead of --seed")
    ap.add_argument("--dump", type=Path, help="write every task's ranking inputs as JSON (for offline study)")
    a = ap.parse_args()
    seeds = whole_numbers(ap, a.seeds, "--seeds", 0, "30,31,32") if a.seeds else []
    if seeds and a.dump:
        ap.error("--dump writes one seed's inputs: give --seed, not --seeds")
    chosen = whole_numbers(ap, a.sizes, "--sizes", 1, SIZES)
    print(asyncio.run(across_seeds(chosen, seeds) if seeds else main(chosen, a.seed, a.dump)))
