"""What the per-cause diagnosis benchmarks share: a corpus grouped by cause, a store that learned part of it
through the real PopulateBatch workflow, and the command line (sizes, seed, noise) that reproduces a run."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bamboo.accumulation.contract import PopulateInput, PopulateResult
from bamboo.contract import Queue
from bamboo.extraction.labels import normalise_label
from bamboo.samples import generate_incidents, write_incidents
from bamboo.services import Services
from bamboo.settings import Settings
from bamboo.temporal_client import connect
from bench.diagnosis.run import worker_for
from tests.analysis.answers import analysis_handler
from tests.services import start_stack
from tests.support.scripted_llm import ScriptedLLMServer
from workflows.populate import PopulateBatch

SEED, NOISE = 6, 0.2


def incidents_by_cause(at_least: int, seed: int, noise: float) -> dict[str, list]:
    """Generated incidents grouped by their cause's label, at least ``at_least`` of every cause."""
    n = 400
    while True:
        by_cause: dict[str, list] = defaultdict(list)
        for incident in generate_incidents(n, seed=seed, noise=noise):
            by_cause[normalise_label(incident.resolution_record.cause)].append(incident)
        if min(len(v) for v in by_cause.values()) >= at_least:
            return by_cause
        n *= 2


@contextmanager
def scratch_stack(prefix: str) -> Iterator[tuple[Path, object]]:
    """(a scratch folder, the embedded stack started in it) for one benchmark run; stopped and removed after."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    stack = start_stack(base)
    try:
        yield base, stack
    finally:
        stack.stop()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class LearnedStore:
    services: Services
    settings: Settings
    populated: PopulateResult
    populate_s: float


@asynccontextmanager
async def learned_store(stack, base: Path, tag: str, incidents: list) -> AsyncIterator[LearnedStore]:
    """A fresh database that learned ``incidents`` through PopulateBatch, with the production worker in this
    process and scripted model servers (the ranking, not a model, is what these benchmarks measure)."""
    folder = base / f"learn-{tag}"
    write_incidents(incidents, folder)
    with ScriptedLLMServer(analysis_handler()) as llm, ScriptedLLMServer() as emb:
        settings = stack.settings(stack.new_database(), llm.base_url)
        settings = settings.model_copy(update={"embedding_base_url": emb.base_url})
        client = await connect(settings)
        async with worker_for(settings, llm.base_url) as services:
            started = time.perf_counter()
            populated: PopulateResult = await client.execute_workflow(
                PopulateBatch.run, PopulateInput(batch_id=f"bench-{tag}", path=str(folder), concurrency=8),
                id=f"populate:bench-{tag}-{time.time_ns()}", task_queue=Queue.MAIN)
            yield LearnedStore(services, settings, populated, time.perf_counter() - started)


def parse_args(description: str, default_sizes: str) -> tuple[list[int], int, float]:
    """(sizes, seed, noise) from the command line; a bad --sizes is a one-line usage error."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--sizes", default=default_sizes, help="incidents per cause to learn, comma-separated")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--noise", type=float, default=NOISE)
    a = ap.parse_args()
    return whole_numbers(ap, a.sizes, "--sizes", 1, default_sizes), a.seed, a.noise


def whole_numbers(ap: argparse.ArgumentParser, text: str, option: str, least: int, example: str) -> list[int]:
    """A comma-separated option's numbers, sorted and once each; a usage error unless all are at least ``least``."""
    try:
        chosen = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        chosen = []
    if not chosen or chosen[0] < least:
        ap.error(f"{option} takes whole numbers of at least {least}, comma-separated, e.g. {example}")
    return chosen


def command(module: str, sizes: list[int], default_sizes: str, seed: int, noise: float) -> str:
    """The command that reproduces this run, defaults left out, as BENCHMARKS.md quotes it."""
    given = ",".join(map(str, sizes))
    return (f"`.venv/bin/python -m {module}" + ("" if given == default_sizes else f" --sizes {given}")
            + ("" if seed == SEED else f" --seed {seed}") + ("" if noise == NOISE else f" --noise {noise}") + "`")
