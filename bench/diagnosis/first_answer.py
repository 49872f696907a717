"""Time to the first answer with the offline model against a scripted one (issue 30), through the real stack.

An analysis answers twice (workflows/analyze.py): as soon as the evidence is read, the `result` query holds
the ranking's answer (answer "first"); the model's second opinion and prose then refine it, each model step
held to the starter's deadline (`AnalyzeInput.model_deadline_s`), and the workflow's result is the final
answer. This measures both, per model, side by side in one run:

* time to the first answer: start of the workflow → the first `result` query that returns an answer
  (polled every `--poll-ms`, so the figure is late by at most one interval plus one query's round trip);
* time to the final answer: start → the workflow's result;
* whether the model step was skipped for missing its deadline (`model_status` "too_slow"), and whether the
  final cause is the first one.

The stack, the corpus split, the populate and the model endpoints are the diagnosis harness's
(`bench/diagnosis/run.py`): `local` is the offline default, SmolLM2-135M behind llama.cpp, started the way
the worker starts it; `capable` is the scripted OpenAI-compatible server. The same held-out tasks are
analysed one after another by each model, at each deadline: the product's default (BAMBOO_LLM_TIMEOUT_S,
what `bamboo analyze` and the bot pass) and a short one (30 s).

    .venv/bin/python -m bench.diagnosis.first_answer --write
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bamboo.analysis.contract import ANALYZE_WORKFLOW, RESULT_QUERY, AnalysisResult, AnalyzeInput, analyze_workflow_id
from bamboo.contract import Queue
from bench.run_facts import commit, loadavg
from bench.stats import percentile
from bamboo.settings import Settings
from temporalio.service import RPCError

OUT = Path(__file__).with_name("first_answer.md")
POLL_MS = 100
# A deadline the offline model may miss on a loaded machine: the ranking's answer then stands.
SHORT_DEADLINE_S = 30.0


class Handle(Protocol):
    """What the measurement needs of a workflow handle (a Temporal `WorkflowHandle`, or a fake in a test)."""

    async def query(self, query: str, *, result_type: Any) -> Any: ...

    async def result(self) -> Any: ...


@dataclass(frozen=True)
class Timed:
    """One analysis: when its first answer was read, when its final answer came, and both answers."""

    first_s: float
    final_s: float
    first: AnalysisResult
    final: AnalysisResult

    @property
    def skipped(self) -> bool:
        return self.final.model_status == "too_slow"

    @property
    def same_cause(self) -> bool:
        return self.first.root_cause == self.final.root_cause


async def timed_answers(start: Callable[[], Awaitable[Handle]], poll_s: float,
                        clock: Callable[[], float] = time.perf_counter) -> Timed:
    """Start a workflow and poll its `result` query every `poll_s` until it holds an answer, then wait for the
    result. A run that finishes before a poll sees an answer counts its final answer as its first (the
    `first` answer then says "final")."""
    t0 = clock()
    handle = await start()
    done: asyncio.Future[AnalysisResult] = asyncio.ensure_future(handle.result())
    first, first_s = None, 0.0
    try:
        while not done.done():
            try:
                first = await handle.query(RESULT_QUERY, result_type=AnalysisResult | None)
            except RPCError:
                first = None  # no worker answered the query yet
            if first is not None:
                first_s = clock() - t0
                break
            await asyncio.wait([done], timeout=poll_s)
        final = await done
    finally:
        if not done.done():
            done.cancel()
    final_s = clock() - t0
    if first is None:
        first, first_s = final, final_s
    return Timed(first_s, final_s, first, final)


async def analyse_timed(name: str, client, tasks: list[dict], deadline_s: float, threshold: float,
                        poll_s: float) -> list[Timed]:
    """Every task through AnalyzeTask at one model deadline, one after another."""
    out = []
    for i, task in enumerate(tasks, 1):
        def start(task: dict = task) -> Awaitable[Handle]:
            return client.start_workflow(
                ANALYZE_WORKFLOW, AnalyzeInput(task_data=task, exploration_threshold=threshold,
                                            model_deadline_s=deadline_s),
                id=analyze_workflow_id(task.get("jediTaskID"), task.get("status")) + f":{time.time_ns()}",
                task_queue=Queue.MAIN, result_type=AnalysisResult)

        timed = await timed_answers(start, poll_s)
        out.append(timed)
        print(f"{name} deadline {deadline_s:g} s {i}/{len(tasks)}: first {timed.first_s:.2f} s ({timed.first.answer}), "
              f"final {timed.final_s:.1f} s, model {timed.final.model_status}, "
              f"{'same' if timed.same_cause else 'changed'} cause", file=sys.stderr, flush=True)
    return out


async def sample_load(samples: list[float], every_s: float = 10.0) -> None:
    """The 1-minute load average every `every_s`, until cancelled."""
    while True:
        samples.append(os.getloadavg()[0])
        await asyncio.sleep(every_s)


async def main(n: int, seed: int, noise: float, models: list[str], limit: int, deadlines: list[float],
               threshold: float, poll_s: float) -> tuple[dict[tuple[str, float], list[Timed]], dict[str, Any]]:
    from bench.diagnosis.run import diagnosis_stack, model_endpoint, populate, split, worker_for

    train, test = split(n, seed, noise)
    tasks = [dict(i.task_data) for i in test[:limit]]
    runs: dict[tuple[str, float], list[Timed]] = {}
    info: dict[str, Any] = {"load_before": loadavg(), "train": len(train), "tasks": len(tasks)}
    wall = time.perf_counter()
    load: list[float] = []
    sampler = asyncio.create_task(sample_load(load))
    async with diagnosis_stack(train, test) as bench:
        async with worker_for(bench.settings, bench.accumulation_url):
            populated, populate_s = await populate(bench, seed)
        info.update(stored=populated.done, failed=populated.failed, populate_s=populate_s)
        for name in models:
            async with model_endpoint(name, bench.settings) as (model_settings, url):
                async with worker_for(model_settings, url):
                    for deadline in deadlines:
                        runs[name, deadline] = await analyse_timed(name, bench.client, tasks, deadline, threshold,
                                                                   poll_s)
    sampler.cancel()
    info.update(load_after=loadavg(), wall_s=time.perf_counter() - wall,
                load_during=f"{sum(load) / len(load):.2f} mean, {max(load):.2f} max")
    return runs, info


LABELS = {
    "local": "offline default: SmolLM2-135M (llama.cpp)",
    "local:smollm2-135m": "offline SmolLM2-135M (llama.cpp)",
    "local:gemma3-270m": "offline Gemma 3 270M (llama.cpp)",
    "capable": "scripted capable model",
    "reckless": "scripted reckless model",
}


def row(name: str, deadline: float, run: list[Timed], default_deadline: float) -> str:
    firsts = [t.first_s for t in run]
    finals = [t.final_s for t in run]
    seen_first = sum(t.first.answer == "first" for t in run)
    failed = sum(t.final.model_status == "failed" for t in run)
    kind = " (default)" if deadline == default_deadline else ""
    return (f"| {LABELS.get(name, name)} | {deadline:g} s{kind} | {len(run)} | {percentile(firsts, 0.50):.2f} s | "
            f"{percentile(firsts, 0.95):.2f} s | {percentile(finals, 0.50):.1f} s | {percentile(finals, 0.95):.1f} s | "
            f"{seen_first} of {len(run)} | {sum(t.skipped for t in run)} | {failed} | "
            f"{sum(t.same_cause for t in run)} of {len(run)} |")


def ratio_row(offline: str, scripted: str, deadline: float, runs: dict[tuple[str, float], list[Timed]]) -> str:
    a, b = runs[offline, deadline], runs[scripted, deadline]

    def r(what: str, p: float) -> str:
        num = percentile([getattr(t, what) for t in a], p / 100)
        den = percentile([getattr(t, what) for t in b], p / 100)
        return f"{num / den:.2f}×" if den > 0 else "n/a"

    return (f"| {LABELS.get(offline, offline)} ÷ {LABELS.get(scripted, scripted)} | {deadline:g} s | "
            f"{r('first_s', 50)} | {r('first_s', 95)} | {r('final_s', 50)} | {r('final_s', 95)} |")


def per_task(name: str, deadline: float, run: list[Timed]) -> str:
    """The run's own figures, task by task, so a percentile can be checked against them."""
    return (f"- {LABELS.get(name, name)}, {deadline:g} s: first " + ", ".join(f"{t.first_s:.2f}" for t in run)
            + " s; final " + ", ".join(f"{t.final_s:.1f}" for t in run) + " s; model "
            + ", ".join(t.final.model_status for t in run))


def reading(runs: dict[tuple[str, float], list[Timed]], scripted: str, offline: list[str]) -> list[str]:
    """What the rows say, computed from them (a re-run rewrites it with its own figures)."""
    everything = [t for run in runs.values() for t in run]
    out = [f"- The first answer: at most {max(t.first_s for t in everything):.2f} s in all {len(everything)} "
           f"analyses; read while the model was still pending in "
           f"{sum(t.first.answer == 'first' for t in everything)} of them."]
    for o in offline:
        for d in dict.fromkeys(d for m, d in runs if m == o):
            a, b = runs[o, d], runs[scripted, d]
            f_o, f_s = percentile([t.first_s for t in a], 0.50), percentile([t.first_s for t in b], 0.50)
            z_o, z_s = percentile([t.final_s for t in a], 0.50), percentile([t.final_s for t in b], 0.50)
            out.append(f"- {LABELS.get(o, o)} at {d:g} s: first answer p50 {f_o:.2f} s against {f_s:.2f} s scripted "
                       f"({f_o / f_s:.2f}×); final answer p50 {z_o:.1f} s against {z_s:.1f} s ({z_o / z_s:.0f}×); "
                       f"the model missed its deadline in {sum(t.skipped for t in a)} of {len(a)} (then the ranking's "
                       f"answer stands, as the final one, once the deadline has passed).")
    out.append(f"- The final cause differed from the first in {sum(not t.same_cause for t in everything)} of "
               f"{len(everything)} analyses.")
    return out


def report(runs: dict[tuple[str, float], list[Timed]], info: dict[str, Any], *, command: str, seed: int,
           noise: float, threshold: float, poll_ms: int, default_deadline: float) -> str:
    models = list(dict.fromkeys(m for m, _ in runs))
    deadlines = list(dict.fromkeys(d for _, d in runs))
    scripted = [m for m in models if not m.startswith("local")]
    offline = [m for m in models if m.startswith("local")]
    lines = [
        "## Time to the first answer, offline model against a scripted one (issue 30)",
        "",
        f"Command: `{command}` ({datetime.date.today().isoformat()}, commit {commit()}; seed {seed}, noise {noise}; "
        f"{info['train']} incidents populated ({info['stored']} stored, {info['failed']} failed, "
        f"{info['populate_s']:.0f} s), the first {info['tasks']} held-out tasks analysed one after another by each "
        f"model at each model deadline; exploration below confidence {threshold}; one run, {os.cpu_count()} cores, "
        f"load average (1 / 5 / 15 min) {info['load_before']} before and {info['load_after']} after, 1-min load "
        f"every 10 s during the run {info['load_during']}; "
        f"{info['wall_s'] / 60:.1f} min in all).",
        "",
        "First answer: workflow start → the first `result` query returning an answer, polled every "
        f"{poll_ms} ms (late by at most one interval plus a query's round trip). Final answer: start → the "
        f"workflow's result. p50 and p95 by nearest rank (with {info['tasks']} tasks p95 is the slowest"
        f"{'' if info['tasks'] < 20 else ' or next to it'}). The default deadline is BAMBOO_LLM_TIMEOUT_S's "
        "default, what `bamboo analyze` and the bot pass; each model step (diagnosis, exploration code, e-mail) "
        "has that long.",
        "",
        "| model | model deadline | tasks | first answer p50 | first answer p95 | final answer p50 | final answer p95 | "
        "first answer read while the model was pending | model skipped (missed its deadline) | model step failed | "
        "final cause = first cause |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *[row(m, d, runs[m, d], default_deadline) for m in models for d in deadlines],
    ]
    if scripted and offline:
        lines += [
            "",
            "| ratio | model deadline | first answer p50 | first answer p95 | final answer p50 | final answer p95 |",
            "|---|---|---|---|---|---|",
            *[ratio_row(o, scripted[0], d, runs) for o in offline for d in deadlines],
            "",
            "Reading, computed from this run:",
            "",
            *reading(runs, scripted[0], offline),
        ]
    lines += ["", "Task by task (seconds from the workflow's start; the model's status in the final answer):", "",
              *[per_task(m, d, runs[m, d]) for m in models for d in deadlines]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="corpus size (at least 150), split 70/30 as in run.py")
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--noise", type=float, default=0.2)
    ap.add_argument("--models", default="capable,local",
                    help="comma-separated: capable, reckless (scripted), local, local:smollm2-135m, local:gemma3-270m")
    ap.add_argument("--limit", type=int, default=6, help="held-out tasks analysed per model and deadline")
    ap.add_argument("--deadlines", default=None,
                    help="comma-separated model deadlines in seconds (default: BAMBOO_LLM_TIMEOUT_S's default, and 30)")
    ap.add_argument("--threshold", type=float, default=0.5, help="exploration threshold (the product's default)")
    ap.add_argument("--poll-ms", type=int, default=POLL_MS)
    ap.add_argument("--write", action="store_true", help=f"write {OUT.name} beside this file")
    a = ap.parse_args()
    if a.n < 150:
        ap.error("--n must be at least 150")
    default_deadline = Settings.model_fields["llm_timeout_s"].default
    deadlines = ([float(d) for d in a.deadlines.split(",") if d.strip()] if a.deadlines
                 else [default_deadline, SHORT_DEADLINE_S])
    chosen = [m.strip() for m in a.models.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in LABELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(LABELS)}")
    runs, info = asyncio.run(main(a.n, a.seed, a.noise, chosen, a.limit, deadlines, a.threshold, a.poll_ms / 1000))
    command = " ".join([".venv/bin/python -m bench.diagnosis.first_answer", *sys.argv[1:]])
    text = report(runs, info, command=command, seed=a.seed, noise=a.noise, threshold=a.threshold,
                  poll_ms=a.poll_ms, default_deadline=default_deadline)
    print(text)
    if a.write:
        OUT.write_text(text)
        print(f"wrote {OUT}", file=sys.stderr)
