"""Diagnosis quality: how often the analysis names the true cause of a task it has never seen, per model.

Corpus: `bamboo.samples.generate_incidents` (documented in that module: realistic PanDA templates —
error dialogs with pilot error codes, task features correlated with the cause, two or three causes per
symptom family, feature noise, red herrings, retry histories), split 70/30 by a seeded shuffle.
The 70% are learned through the real PopulateBatch workflow from their reviewed resolution records
(the scripted LLM only echoes canonical labels, so no capable model is needed). The 30% are analysed
from their task fields alone — resolution record, email and expected labels are dropped first.

For every model, in one run and on the same held-out tasks, side by side:
* the ranking's accuracy (`AnalysisService.gather_evidence`, top-k of the ranked candidates; the same
  for every model, repeated in each row so the two figures a row compares sit next to each other);
* the final answer's accuracy: the real AnalyzeTask workflow through Temporal, with the production worker
  (diagnosis, exploration in the sandbox against the PanDA simulator, procedure replay, email draft);
* the model's own pick — what the answer would be if the model's choice were taken as it came.

Models: `local` is the offline default, SmolLM2-135M behind llama.cpp, started the way the worker starts
it when no endpoint is configured (only its port is a free one). `capable` and `reckless` are scripted
OpenAI-compatible servers (see `scripted_models`): a stand-in for a capable model, and the failure modes
measured with the offline model. `endpoint` is BAMBOO_LLM_BASE_URL / BAMBOO_LLM_MODEL, when set.

    .venv/bin/python -m bench.diagnosis.run --models local,capable,reckless --out bench/diagnosis/results.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bamboo.analysis.contract import AnalysisResult, AnalyzeInput, analyze_workflow_id
from bamboo.analysis.service import AnalysisService
from bamboo.devstack.ports import free_port
from bamboo.extraction.labels import normalise_label
from bamboo.accumulation.contract import PopulateInput, PopulateResult
from bamboo.samples import generate_incidents, write_incidents
from worker.services import build_services
from bamboo.settings import Settings
from bamboo.temporal_client import connect
from temporalio.client import Client
from bench.diagnosis.scripted_models import SCRIPTED
from tests.analysis.answers import analysis_handler
from tests.services import start_stack
from tests.support.scripted_llm import ScriptedLLMServer
from worker.main import run_worker
from workflows.analyze import AnalyzeTask
from workflows.populate import PopulateBatch
from bamboo.contract import Queue

MARGIN_SPLIT = 0.6


def split(n: int, seed: int, noise: float):
    incidents = generate_incidents(n, seed=seed, noise=noise)
    order = list(range(n))
    random.Random(seed + 1).shuffle(order)
    cut = int(round(n * 0.7))
    return [incidents[i] for i in order[:cut]], [incidents[i] for i in order[cut:]]


@dataclass(frozen=True)
class Ranked:
    truth: str
    names: list[str]
    margin: float
    latency_s: float


@dataclass(frozen=True)
class Analysed:
    result: AnalysisResult
    latency_s: float


@asynccontextmanager
async def model_endpoint(name: str, settings: Settings):
    """(settings, base URL) for one model; a server started here is stopped on exit."""
    if name == "local" or name.startswith("local:"):
        from bamboo.llm.local import resolve_llm_endpoint, stop_shared_local_llm

        weights = name.partition(":")[2] or "auto"
        local = settings.model_copy(update={"llm_base_url": None, "llm_model": "local",
                                            "llm_local_port": free_port(), "llm_local_weights": weights})
        url = await asyncio.to_thread(resolve_llm_endpoint, local)
        try:
            yield local, url
        finally:
            await asyncio.to_thread(stop_shared_local_llm)
    elif name == "endpoint":
        url = os.environ.get("BAMBOO_LLM_BASE_URL")
        if not url:
            raise SystemExit("--models endpoint needs BAMBOO_LLM_BASE_URL (and BAMBOO_LLM_MODEL, BAMBOO_LLM_API_KEY)")
        yield settings.model_copy(update={"llm_base_url": url,
                                          "llm_model": os.environ.get("BAMBOO_LLM_MODEL", settings.llm_model)}), url
    else:
        with ScriptedLLMServer(SCRIPTED[name]()) as server:
            yield settings.model_copy(update={"llm_base_url": server.base_url, "llm_model": server.model}), \
                server.base_url


@asynccontextmanager
async def worker_for(settings: Settings, llm_url: str):
    """The production worker in this process, with services bound to one model."""
    services = await build_services(settings, llm_base_url=llm_url, pool_size=8)
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, services=services, stop=stop))
    try:
        yield services
    finally:
        stop.set()
        await asyncio.wait_for(task, 120)
        await services.close()


async def analyse(name: str, client, tasks: list[dict], threshold: float) -> list[Analysed]:
    """Every task through AnalyzeTask, one after another; a workflow that fails stops the benchmark."""
    out = []
    for i, task in enumerate(tasks, 1):
        t0 = time.perf_counter()
        result: AnalysisResult = await client.execute_workflow(
            AnalyzeTask.run, AnalyzeInput(task_data=task, exploration_threshold=threshold, sandbox_wait_s=30),
            id=analyze_workflow_id(task.get("jediTaskID"), task.get("status")) + f":{time.time_ns()}",
            task_queue=Queue.MAIN,
        )
        out.append(Analysed(result, time.perf_counter() - t0))
        print(f"{name} {i}/{len(tasks)}: {out[-1].latency_s:.1f} s, {result.cause_source}", file=sys.stderr, flush=True)
    return out


@dataclass(frozen=True)
class Stack:
    """The embedded stack of one run: Temporal, Postgres, a PanDA simulator serving the held-out tasks, the
    scripted accumulation model (learning only echoes labels) and a scripted embedder."""

    settings: Settings
    client: Client
    accumulation_url: str
    train_dir: Path


@asynccontextmanager
async def diagnosis_stack(train: list, test: list):
    """A fresh stack with the train and held-out incidents written out; stopped and removed on exit."""
    from bamboo.panda.simulator import PandaSimulator

    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-diag-"))
    stack = start_stack(base)
    try:
        write_incidents(train, base / "train")
        write_incidents(test, base / "held-out")
        async with AsyncExitStack() as ctx:
            accumulation = ctx.enter_context(ScriptedLLMServer(analysis_handler()))
            emb = ctx.enter_context(ScriptedLLMServer())
            panda = ctx.enter_context(PandaSimulator(base / "held-out"))
            settings = stack.settings(stack.new_database(), accumulation.base_url, panda_api_url=panda.api_url,
                                      panda_monitor_url=panda.monitor_url)
            settings = settings.model_copy(update={"embedding_base_url": emb.base_url})
            yield Stack(settings, await connect(settings), accumulation.base_url, base / "train")
    finally:
        stack.stop()
        shutil.rmtree(base, ignore_errors=True)


async def populate(stack: Stack, seed: int) -> tuple[PopulateResult, float]:
    """The train incidents learned through the real PopulateBatch workflow (a worker must run); and its seconds."""
    started = time.perf_counter()
    populated: PopulateResult = await stack.client.execute_workflow(
        PopulateBatch.run,
        PopulateInput(batch_id=f"bench-diag-{seed}", path=str(stack.train_dir), concurrency=8),
        id=f"populate:bench-diag-{time.time_ns()}", task_queue=Queue.MAIN,
    )
    if populated.failed:
        print(f"populate failures: {populated.failures[:3]}", file=sys.stderr)
    return populated, time.perf_counter() - started


async def main(n: int, seed: int, noise: float, models: list[str], limit: int | None, threshold: float,
               out: Path | None) -> int:
    train, test = split(n, seed, noise)
    test = test[:limit] if limit else test
    tasks = [dict(i.task_data) for i in test]
    truths = [normalise_label(i.resolution_record.cause) for i in test]
    runs: dict[str, list[Analysed]] = {}
    async with diagnosis_stack(train, test) as bench:
        settings, client = bench.settings, bench.client
        async with worker_for(settings, bench.accumulation_url) as services:
            populated, populate_s = await populate(bench, seed)
            before = await services.store.knowledge.row_counts()
            ranked = await rank_all(AnalysisService(services), tasks, truths)
        for name in models:
            async with model_endpoint(name, settings) as (model_settings, url):
                async with worker_for(model_settings, url):
                    runs[name] = await analyse(name, client, tasks, threshold)
        after_services = await build_services(settings, llm_base_url=bench.accumulation_url, pool_size=2)
        after = await after_services.store.knowledge.row_counts()
        await after_services.close()

    text = report(n, seed, noise, limit, threshold, len(train), populated, populate_s, before == after, ranked, runs)
    print(text)
    if out:
        out.write_text(text)
    return 0 if all(final_at_1(runs[m], ranked) >= ranking_at(ranked, 1) for m in runs) else 1


async def rank_all(analysis: AnalysisService, tasks: list[dict], truths: list[str]) -> list[Ranked]:
    from bamboo.analysis.ranked import ranking_confidence

    ranked = []
    for task, truth in zip(tasks, truths):
        t0 = time.perf_counter()
        evidence = await analysis.gather_evidence(task)
        ranked.append(Ranked(truth, [c.name for c in evidence.candidates], ranking_confidence(evidence.candidates),
                             time.perf_counter() - t0))
    return ranked


def ranking_at(ranked: list[Ranked], k: int) -> float:
    return sum(r.truth in r.names[:k] for r in ranked) / len(ranked)


def final_at_1(run: list[Analysed], ranked: list[Ranked]) -> float:
    return sum(a.result.root_cause == r.truth for a, r in zip(run, ranked)) / len(ranked)


def model_row(name: str, run: list[Analysed], ranked: list[Ranked]) -> str:
    m = len(ranked)
    final3 = sum(r.truth in ([a.result.root_cause] + [c for c in r.names if c != a.result.root_cause])[:3]
                 for a, r in zip(run, ranked)) / m
    own = sum(a.result.model_proposal is not None and a.result.model_proposal.cause == r.truth
              for a, r in zip(run, ranked)) / m
    verdicts = Counter(a.result.model_proposal.verdict if a.result.model_proposal else "no answer" for a in run)
    taken = [(a, r) for a, r in zip(run, ranked) if a.result.cause_source == "model_override"]
    taken_right = sum(a.result.root_cause == r.truth for a, r in taken)
    refused_right = sum(a.result.model_proposal.cause == r.truth for a, r in zip(run, ranked)
                        if a.result.model_proposal and a.result.model_proposal.verdict == "override_refused")
    explore = Counter(exploration_outcome(a.result) for a in run)
    holds = "yes" if final_at_1(run, ranked) >= ranking_at(ranked, 1) else "**no**"
    return (f"| {LABELS.get(name, name)} | {ranking_at(ranked, 1):.2f} | {final_at_1(run, ranked):.2f} | {holds} | "
            f"{own:.2f} | {final3:.2f} | {verdicts['agreed']} | {len(taken)} ({taken_right} right) | "
            f"{verdicts['override_refused']} ({refused_right} would have been right) | {verdicts['no answer']} | "
            f"{explore['ran']} ran, {explore['no_tool_call']} not run (no tool call), {explore['other']} other | "
            f"{statistics.mean(a.latency_s for a in run):.1f} s | {grounded_share(run, 'explanation')} | "
            f"{grounded_share(run, 'email')} |")


def grounded_share(run: list[Analysed], what: str) -> str:
    """Share of the model's prose that passed the grounding checks and was shown (else the deterministic draft)."""
    shown = sum((a.result.explanation_source if what == "explanation" else a.result.email_source) == "llm" for a in run)
    return f"{shown / len(run):.2f}"


def exploration_outcome(result: AnalysisResult) -> str:
    step = next((s for s in result.steps if s.step == "exploratory_investigation"), None)
    if step is None or (step.status == "not_needed" and "≥" in step.detail):
        return "not_needed"
    if step.status == "ran":
        return "ran"
    return "no_tool_call" if "no_tool_call" in step.detail else "other"


LABELS = {
    "local": "local, the offline default (llama.cpp)",
    "local:smollm2-135m": "local SmolLM2-135M (llama.cpp)",
    "local:gemma3-270m": "local Gemma 3 270M (llama.cpp)",
    "capable": "scripted capable model",
    "reckless": "scripted reckless model",
    "endpoint": f"endpoint {os.environ.get('BAMBOO_LLM_MODEL', '')}".strip(),
}


def report(n, seed, noise, limit, threshold, n_train, populated, populate_s, unchanged, ranked, runs) -> str:
    m = len(ranked)
    models = ",".join(runs)
    command = (f".venv/bin/python -m bench.diagnosis.run --models {models}"
               + ("" if n == 200 else f" --n {n}") + ("" if seed == 6 else f" --seed {seed}")
               + ("" if noise == 0.2 else f" --noise {noise}") + (f" --limit {limit}" if limit else ""))
    confident = [r for r in ranked if r.margin >= MARGIN_SPLIT]
    contested = [r for r in ranked if r.margin < MARGIN_SPLIT]

    def acc(rows: list[Ranked]) -> str:
        return f"{sum(r.truth == (r.names[:1] or [''])[0] for r in rows)}/{len(rows)}" if rows else "0/0"

    lines = [
        f"Command: `{command}` (seed {seed}, noise {noise}; {n_train} incidents populated, {m} held out and analysed "
        f"by every model; exploration below confidence {threshold}; one run, this machine: {os.cpu_count()} cores)",
        "",
        f"Populate of the 70%: {populated.done} stored, {populated.failed} failed, {populate_s:.1f} s. "
        f"Knowledge-store row counts unchanged by {m * len(runs)} analyses: {unchanged}.",
        "",
        f"Ranking alone: accuracy@1 {ranking_at(ranked, 1):.2f}, accuracy@3 {ranking_at(ranked, 3):.2f}, "
        f"{statistics.mean(r.latency_s for r in ranked) * 1000:.0f} ms per task. Its confidence (ranking_confidence: the "
        f"top candidate's calibrated lead) sorts its answers: right in {acc(confident)} tasks at confidence ≥ {MARGIN_SPLIT}, "
        f"{acc(contested)} below.",
        "",
        "| model | ranking accuracy@1 | final answer accuracy@1 | final ≥ ranking | model's own pick accuracy@1 | "
        "final accuracy@3 | model agreed with the ranking | override taken | override refused | "
        "model step failed (ranking used) | exploration | mean latency per task | model explanation passed grounding | "
        "model email passed grounding |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *[model_row(name, run, ranked) for name, run in runs.items()],
        "",
        "The final answer is the AnalyzeTask result through Temporal; the model's own pick is the cause the model "
        "answered, as it came. accuracy@3 counts the final answer first, then the ranking's other candidates. "
        "Latency is end to end per task (evidence, diagnosis, exploration when the confidence is low, procedure plan, "
        "email draft), tasks one after another.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="corpus size (at least 150)")
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--noise", type=float, default=0.2)
    ap.add_argument("--models", default="local,capable,reckless",
                    help="comma-separated: local (the offline default), local:smollm2-135m, local:gemma3-270m, "
                         "capable, reckless, endpoint")
    ap.add_argument("--limit", type=int, help="analyse only the first N held-out tasks")
    ap.add_argument("--threshold", type=float, default=0.5, help="exploration threshold (the product's default)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if a.n < 150:
        ap.error("--n must be at least 150")
    chosen = [m.strip() for m in a.models.split(",") if m.strip()]
    known = {"local", "local:smollm2-135m", "local:gemma3-270m", "endpoint", *SCRIPTED}
    unknown = [m for m in chosen if m not in known]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(sorted(known))}")
    sys.exit(asyncio.run(main(a.n, a.seed, a.noise, chosen, a.limit, a.threshold, a.out)))
