"""Analysis cost against how much was learned (issue 25, item 5): synthetic stores of 1k and 10k
incidents (and 100k with `--sizes 1000,10000,100000`: 13 minutes to learn here), the same held-out
tasks analysed on each, with the evidence queries before issue 25 and now side by side in one run.

Each store is a fresh database on the embedded Postgres, learned without a model: the generator's
incidents with reviewed records go through the product's extraction and are written in groups of 2,000
by the store's own write path (`bench/analysis_scale/store_builder.py`; no passages, so no similar-incident
search cost: vector retrieval is measured on its own). Above `--templates` distinct incidents (default
5,000), the store repeats their graphs under new task ids: the number of causes and feature values stays
that of the generator's corpus, as it would in a real store, while the incidents per cause and per common
feature grow with the store, which is what made analysis slow. The store is vacuumed and analysed after
loading, as autovacuum would have done in a store that grew over months.

An analysis here is the four steps of `AnalyzeTask` that every task runs, called in process one after
the other (gather evidence, diagnose, procedure plan, e-mail draft) with a scripted model answering at
once, not through Temporal: its workflow tasks cost the same whatever the store's size. The *before*
code is the previous evidence queries, kept in `bench/analysis_scale/previous_queries.py` and swapped in
for its runs. All stores are learned first; then each task runs on every store with both codes, the order
of stores and of codes rotating task by task, so the ratios between stores and between codes come from
one stretch of time on a shared machine.

    .venv/bin/python -m bench.analysis_scale.run --write
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import psutil
import psycopg

from bamboo.analysis.contract import DiagnoseInput, EmailInput
from bamboo.analysis.service import AnalysisService
from bamboo.samples import generate_incidents
from bench.analysis_scale.previous_queries import previous_queries
from bench.analysis_scale.store_builder import graph_writes, learn
from tests.analysis.answers import analysis_handler
from tests.services import ROOT, start_stack
from tests.support.scripted_llm import ScriptedLLMServer
from bench.stats import percentile

RESULTS = Path(__file__).with_name("results.md")
DEFAULT_SIZES = [1000, 10_000]
DEFAULT_TASKS = 20
DEFAULT_TEMPLATES = 5000
# Graphs per write when loading: larger than a populate group, as a loader may; each write recounts the
# counters of the edges it touches, so fewer, larger writes load a large store faster.
LOAD_GROUP = 2000
# The previous queries take most of a minute per task on a store of 100k: above this size they run on the first
# --before-tasks tasks only.
FULL_BEFORE_UP_TO = 10_000
DEFAULT_BEFORE_TASKS = 3
STEPS = ("evidence", "diagnose", "procedure plan", "email")
# Target (issue 25): analyze p50 at the largest store within 1.5x of that at the smallest.
MAX_GROWTH = 1.5


async def build_store(services, size: int, templates: int) -> float:
    """Learn `size` incidents into the services' (fresh) store; returns the seconds it took."""
    key = services.settings.pseudonym_key.get_secret_value().encode()
    base = await graph_writes(generate_incidents(min(size, templates), seed=2026), key)
    writes = list(base)
    for i in range(len(base), size):
        template = base[i % len(base)]
        task_id = 900_000_000 + i
        status = template.graph_id.rsplit(":", 1)[-1]
        writes.append(template.model_copy(update={"graph_id": f"panda:{task_id}:{status}",
                                                  "incident_id": f"synthetic-{i}", "task_id": task_id}))
    started = time.perf_counter()
    await learn(services.store.knowledge, writes, group=LOAD_GROUP)
    async with await psycopg.AsyncConnection.connect(services.settings.database_url, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


async def analyse(analysis: AnalysisService, task: dict) -> tuple[dict[str, float], str]:
    """One analysis's steps, timed; and the cause it named."""
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    evidence = await analysis.gather_evidence(task)
    times["evidence"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    diagnosis = await analysis.diagnose(DiagnoseInput(evidence=evidence))
    times["diagnose"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = await analysis.procedure_plan(diagnosis.root_cause)
    times["procedure plan"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    await analysis.email(EmailInput(task_id=task.get("jediTaskID"), task_name=str(task.get("taskName", "")),
                                    diagnosis=diagnosis, suggestions=[s.name for s in plan.steps][:5]))
    times["email"] = time.perf_counter() - t0
    times["analyze"] = sum(times[s] for s in STEPS)
    top = evidence.candidates[0].name if evidence.candidates else ""
    return times, top


async def open_store(stack, llm_url: str, size: int, templates: int):
    """A fresh database learned with `size` incidents, and the services reading it."""
    from worker.services import build_services

    settings = stack.settings(stack.new_database(), llm_url)
    services = await build_services(settings, llm_base_url=llm_url, pool_size=4)
    load_s = await build_store(services, size, templates)
    print(f"{size}: learned in {load_s:.0f} s", flush=True)
    return services, load_s


async def measure(stores: dict[int, tuple], tasks: list[dict], before_tasks: int) -> list[dict]:
    """Every task on every store, with both codes; the order of stores and of codes rotates task by task,
    so a shared machine's drift falls on all of them alike."""
    analyses = {size: AnalysisService(services) for size, (services, _) in stores.items()}
    runs = {size: {"before": [], "after": []} for size in stores}
    tops = {size: {"before": [], "after": []} for size in stores}
    for analysis in analyses.values():
        await analyse(analysis, tasks[0])  # warm the pool and the plan cache
    sizes = list(stores)
    for n, task in enumerate(tasks):
        order = sizes[n % len(sizes):] + sizes[:n % len(sizes)]
        for size in order:
            for code in (["before", "after"] if n % 2 == 0 else ["after", "before"]):
                if code == "before" and size > FULL_BEFORE_UP_TO and n >= before_tasks:
                    continue
                if code == "before":
                    with previous_queries():
                        times, top = await analyse(analyses[size], task)
                else:
                    times, top = await analyse(analyses[size], task)
                runs[size][code].append(times)
                tops[size][code].append(top)
        print(f"task {n + 1}/{len(tasks)}: " + ", ".join(
            f"{size}: " + " ".join(f"{c}={runs[size][c][-1]['analyze'] * 1000:.0f}ms" for c in ("before", "after")
                                   if len(runs[size][c]) > n) for size in sizes), flush=True)
    return [{"size": size, "load_s": stores[size][1], "runs": runs[size],
             "agree": sum(a == b for a, b in zip(tops[size]["before"], tops[size]["after"])),
             "compared": len(tops[size]["before"])} for size in sizes]


def report(results: list[dict], tasks: int, templates: int, args: list[str]) -> str:
    sizes = ", ".join(f"{r['size']:,}" for r in results)
    lines = [
        "# Analysis cost against how much was learned (issue 25)",
        "",
        f"Command: `.venv/bin/python -m bench.analysis_scale.run{''.join(' ' + a for a in args)} --write` "
        f"(synthetic stores of {sizes} incidents, learned through the store's "
        f"write path without passages, graphs of {templates:,} distinct generated incidents repeated above that; "
        f"{tasks} held-out tasks per store, the four steps of an analysis in process with a scripted model "
        f"answering at once; before = the evidence queries of commit 4ff1016, after = this tree; stores and "
        f"codes interleaved task by task; this machine: {psutil.cpu_count()} cores; "
        f"run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        "| incidents | code | tasks | analyze p50 ms | analyze p95 ms | evidence p50 ms | evidence share (median) "
        "| diagnose p50 ms | procedure plan p50 ms | email p50 ms | analyze p50 ÷ smallest store's |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    smallest = {code: median(t["analyze"] for t in results[0]["runs"][code]) for code in ("before", "after")
                if results[0]["runs"][code]}
    for r in results:
        for code in ("before", "after"):
            runs = r["runs"][code]
            if not runs:
                continue
            p50 = median(t["analyze"] for t in runs)
            share = median(t["evidence"] / t["analyze"] for t in runs)
            steps = " | ".join(f"{median(t[s] for t in runs) * 1000:.0f}" for s in STEPS[1:])
            lines.append(f"| {r['size']:,} | {code} | {len(runs)} | {p50 * 1000:.0f} "
                         f"| {percentile([t['analyze'] for t in runs], 0.95) * 1000:.0f} "
                         f"| {median(t['evidence'] for t in runs) * 1000:.0f} | {share:.0%} | {steps} "
                         f"| {p50 / smallest[code]:.2f} |")
    lines += ["", "| incidents | seconds to learn the store | incidents/s | after ÷ before, analyze p50 "
              "| same top candidate before and after |", "|---|---|---|---|---|"]
    for r in results:
        before, after = r["runs"]["before"], r["runs"]["after"][:len(r["runs"]["before"])]
        ratio = (median(t["analyze"] for t in after) / median(t["analyze"] for t in before)) if before else float("nan")
        lines.append(f"| {r['size']:,} | {r['load_s']:.0f} | {r['size'] / r['load_s']:.0f} | {ratio:.2f} "
                     f"| {r['agree']}/{r['compared']} |")
    largest, first = results[-1], results[0]
    growth = median(t["analyze"] for t in largest["runs"]["after"]) / median(t["analyze"] for t in first["runs"]["after"])
    lines += ["", f"Target: analyze p50 at {largest['size']:,} incidents within {MAX_GROWTH}× of that at "
              f"{first['size']:,}: {growth:.2f}× → {'MET' if growth <= MAX_GROWTH else 'NOT met'} (after)."]
    return "\n".join(lines) + "\n"


async def main(sizes: list[int], tasks: int, templates: int, before_tasks: int, args: list[str], write: bool) -> None:
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-analysis-"))
    stack = start_stack(base, persistent=False)
    held_out = [i.task_data for i in generate_incidents(tasks, seed=4242)]
    stores: dict[int, tuple] = {}
    try:
        with ScriptedLLMServer(analysis_handler()) as llm:
            for size in sizes:
                stores[size] = await open_store(stack, llm.base_url, size, templates)
            results = await measure(stores, held_out, before_tasks)
    finally:
        for services, _ in stores.values():
            await services.close()
        stack.stop()
        if not os.environ.get("BAMBOO_BENCH_KEEP"):
            shutil.rmtree(base, ignore_errors=True)
    text = report(results, tasks, templates, args)
    print(text)
    if write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                    help="incidents per store, comma-separated (default 1000,10000; 100000 takes about 13 minutes "
                         "to learn on a shared 2-core machine)")
    ap.add_argument("--tasks", type=int, default=DEFAULT_TASKS, help="held-out tasks analysed per store")
    ap.add_argument("--before-tasks", type=int, default=DEFAULT_BEFORE_TASKS,
                    help=f"on stores above {FULL_BEFORE_UP_TO:,} incidents, how many tasks also run with the previous "
                         f"queries (default {DEFAULT_BEFORE_TASKS}; on smaller stores all do)")
    ap.add_argument("--templates", type=int, default=DEFAULT_TEMPLATES,
                    help="distinct generated incidents; a larger store repeats their graphs under new task ids")
    ap.add_argument("--write", action="store_true", help=f"store the output in {RESULTS.relative_to(ROOT)}")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    extra = [f"--sizes {a.sizes}"] if sizes != DEFAULT_SIZES else []
    extra += [f"--tasks {a.tasks}"] if a.tasks != DEFAULT_TASKS else []
    extra += [f"--before-tasks {a.before_tasks}"] if a.before_tasks != DEFAULT_BEFORE_TASKS else []
    extra += [f"--templates {a.templates}"] if a.templates != DEFAULT_TEMPLATES else []
    sys.exit(asyncio.run(main(sizes, a.tasks, a.templates, a.before_tasks,
                              extra, a.write)))
