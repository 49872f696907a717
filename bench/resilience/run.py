"""Small work beside a pathological neighbour on the same worker (issue 28).

Two parts, each measured for this tree (figures of the code before issue 28 are recorded in
`bench/resilience/notes.md` with the commit they came from: a benchmark runs from a fresh clone with what
`make install` installs, and an older tree needs its own dependencies):

- *sandbox*: small runs (`return {...}`) through one `execute_code` activity object on one event loop,
  alone, then while a neighbour run prints about 4 MiB a stream of secret-shaped lines, over and over
  (`bench/resilience/sandbox_probe.py`, run in a child interpreter). Also the worst event-loop gap and
  the neighbour's worst heartbeat gap.
- *populate*: a real worker process against the real Temporal dev server and Postgres, with a scripted
  LLM at a fixed latency per call. Small incidents, each its own one-incident batch, alone, then while a
  neighbour batch learns large legal incidents (a task with 1.5 million array elements, one with 200k
  keys; each under 8 MiB and every bound) again and again. Then one batch mixing small incidents with six
  large ones on a fresh database: model calls per stored incident (two for every incident on the email
  path: extraction and review), escalations, failures.

Latencies are reported as p50 and p99 (nearest rank) with and without the neighbour and as the ratio
beside ÷ alone.

    .venv/bin/python -m bench.resilience.run --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bamboo.accumulation.contract import (
    POPULATE_WORKFLOW, WORKFLOW_QUEUE, PopulateInput, PopulateResult, batch_workflow_id,
)
from bamboo.samples import generate_incidents, write_incidents
from bamboo.temporal_client import connect
from bench.populate.run import spawn_worker, wait_until_polling
from tests.services import ROOT, start_stack
from tests.support.answers import accumulation_handler
from tests.support.scripted_llm import ScriptedLLMServer
from bench.stats import percentile

PROBE = Path(__file__).with_name("sandbox_probe.py")
LLM_LATENCY_S = 0.05
BATCH_LIMIT_S = 600.0


RESULTS = Path(__file__).with_name("results.md")
CODE = "this tree"


# ---------------------------------------------------------------- sandbox
def sandbox_part(seconds: float, at_least: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(PROBE), str(seconds), str(at_least)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the sandbox probe failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- populate
def large_legal_incidents(seed: int) -> list[dict]:
    """Two incidents on the email path, each under 8 MiB and every bound, each seconds of parsing."""
    first, second = (i.model_copy(update={"resolution_record": None}).model_dump(mode="json")
                     for i in generate_incidents(2, seed=seed))
    first["incident_id"] = f"large-array-{seed}"
    first["task_data"]["jobMetrics"] = ["a"] * 1_500_000
    second["incident_id"] = f"large-keys-{seed}"
    second["task_data"].update({f"k{i:06d}": "v" for i in range(200_000)})
    return [first, second]


def write_large(incidents: list[dict], path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for doc in incidents:
        (path / f"{doc['incident_id']}.json").write_text(json.dumps(doc, separators=(",", ":")))


def small_batches(base: Path, count: int, seed: int) -> list[Path]:
    """One directory per small incident: each is a batch of its own, timed end to end."""
    dirs = []
    for n, incident in enumerate(generate_incidents(count, seed=seed)):
        d = base / f"small-{seed}-{n}"
        write_incidents([incident.model_copy(update={"resolution_record": None})], d)
        dirs.append(d)
    return dirs


async def run_batch(client, path: Path, tag: str, *, relearn: bool = False, concurrency: int = 4) -> PopulateResult:
    batch_id = f"{tag}-{time.time_ns()}"
    try:
        return await asyncio.wait_for(client.execute_workflow(
            POPULATE_WORKFLOW, PopulateInput(batch_id=batch_id, path=str(path), concurrency=concurrency,
                                             relearn=relearn),
            id=batch_workflow_id(batch_id), task_queue=WORKFLOW_QUEUE, result_type=PopulateResult), BATCH_LIMIT_S)
    except asyncio.TimeoutError:
        await client.get_workflow_handle(batch_workflow_id(batch_id)).terminate("benchmark time limit")
        raise SystemExit(f"{batch_id} did not finish within {BATCH_LIMIT_S:.0f} s") from None


async def timed_small(client, dirs: list[Path], tag: str) -> list[float]:
    latencies = []
    for d in dirs:
        t0 = time.perf_counter()
        result = await run_batch(client, d, tag)
        if result.done != 1:
            raise SystemExit(f"a small incident was not learned ({tag}): {result.failures}")
        latencies.append(time.perf_counter() - t0)
    return latencies


async def populate_part(stack, work: Path, small: int) -> dict:
    with ScriptedLLMServer(accumulation_handler(), latency_s=LLM_LATENCY_S) as llm, ScriptedLLMServer() as emb:
        settings = stack.settings(stack.new_database(), llm.base_url).model_copy(
            update={"embedding_base_url": emb.base_url})
        log = work / f"worker-{time.time_ns()}.log"
        worker = spawn_worker(settings, log)
        try:
            client = await connect(settings)
            await wait_until_polling([log], [worker])
            alone = await timed_small(client, small_batches(work, small, seed=101), "alone")
            neighbour_dir = work / "large"
            write_large(large_legal_incidents(201) + large_legal_incidents(202) + large_legal_incidents(203),
                        neighbour_dir)
            neighbour_batches = [0]
            stop = asyncio.Event()

            async def neighbour() -> None:
                while not stop.is_set():
                    await run_batch(client, neighbour_dir, "neighbour", relearn=True, concurrency=2)
                    neighbour_batches[0] += 1

            noisy = asyncio.create_task(neighbour())
            await asyncio.sleep(2.0)  # its first slice is reading the large files
            beside = await timed_small(client, small_batches(work, small, seed=102), "beside")
            stop.set()
            await noisy  # let the neighbour batch end normally: its outcome is part of the figure
        finally:
            worker.terminate()
            worker.wait(30)
        mixed = await mixed_batch(stack, work, small)
    return {"alone": alone, "beside": beside, "neighbour_batches": neighbour_batches[0], **mixed}


async def mixed_batch(stack, work: Path, small: int) -> dict:
    """Small incidents and six large legal ones in one batch on a fresh database: model calls per stored incident."""
    batch = work / "mixed"
    write_incidents([i.model_copy(update={"resolution_record": None}) for i in generate_incidents(small, seed=301)],
                    batch)
    write_large(large_legal_incidents(302) + large_legal_incidents(303) + large_legal_incidents(304), batch)
    with ScriptedLLMServer(accumulation_handler(), latency_s=LLM_LATENCY_S) as llm, ScriptedLLMServer() as emb:
        settings = stack.settings(stack.new_database(), llm.base_url).model_copy(
            update={"embedding_base_url": emb.base_url})
        log = work / f"worker-mixed-{time.time_ns()}.log"
        worker = spawn_worker(settings, log)
        try:
            client = await connect(settings)
            await wait_until_polling([log], [worker])
            t0 = time.perf_counter()
            result = await run_batch(client, batch, "mixed", concurrency=4)
            wall = time.perf_counter() - t0
        finally:
            worker.terminate()
            worker.wait(30)
        return {"mixed_total": result.total, "mixed_stored": result.done, "mixed_failed": result.failed,
                "mixed_escalated": result.escalated, "mixed_calls": llm.call_count, "mixed_wall_s": wall}


# ---------------------------------------------------------------- report
def latency_rows(part: str, results: dict[str, dict]) -> list[str]:
    rows = []
    for name, r in results.items():
        a50, a99 = percentile(r["alone"], 0.5), percentile(r["alone"], 0.99)
        b50, b99 = percentile(r["beside"], 0.5), percentile(r["beside"], 0.99)
        rows.append(f"| {part} | {name} | {len(r['alone'])} / {len(r['beside'])} | {a50 * 1000:.0f} "
                    f"| {a99 * 1000:.0f} | {b50 * 1000:.0f} | {b99 * 1000:.0f} | {b50 / a50:.2f} | {b99 / a99:.2f} |")
    return rows


def report(sandbox: dict[str, dict], populate: dict[str, dict], seconds: float, small: int, args: list[str]) -> str:
    lines = [
        "# Small work beside a pathological neighbour on the same worker (issue 28)",
        "",
        f"Command: `.venv/bin/python -m bench.resilience.run{''.join(' ' + a for a in args)} --write` (this tree; "
        f"run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; this machine: "
        f"{psutil.cpu_count()} cores; sandbox: small runs for {seconds:g} s alone and {seconds:g} s beside a run "
        f"printing ~4 MiB a stream of `aws key=` lines, isolation {next(iter(sandbox.values()))['isolation']}; "
        f"populate: {small} one-incident batches alone and {small} beside a batch of six large legal incidents "
        f"learned again and again, scripted LLM at {LLM_LATENCY_S * 1000:.0f} ms per call)",
        "",
        "| part | code | samples alone / beside | p50 alone ms | p99 alone ms | p50 beside ms | p99 beside ms "
        "| p50 beside ÷ alone | p99 beside ÷ alone |",
        "|---|---|---|---|---|---|---|---|---|",
        *latency_rows("sandbox run", sandbox),
        *latency_rows("populate incident", populate),
        "",
        "| code | worst loop gap, sandbox alone s | worst loop gap, sandbox beside s "
        "| neighbour's worst heartbeat gap s | neighbour runs | neighbour batches (populate) |",
        "|---|---|---|---|---|---|",
    ]
    for name in sandbox:
        s, p = sandbox[name], populate[name]
        lines.append(f"| {name} | {s['alone_loop_gap_s']:.2f} | {s['beside_loop_gap_s']:.2f} "
                     f"| {s['neighbour_heartbeat_gap_s']:.1f} | {s['neighbour_runs']} | {p['neighbour_batches']} |")
    lines += ["", f"A batch of {small} small and six large legal incidents on a fresh database (target: 2 model calls "
              "per stored incident, as for any incident):", "",
              "| code | incidents | stored | failed | escalated | model calls | calls per stored incident | wall s |",
              "|---|---|---|---|---|---|---|---|"]
    for name, p in populate.items():
        per = p["mixed_calls"] / p["mixed_stored"] if p["mixed_stored"] else float("nan")
        lines.append(f"| {name} | {p['mixed_total']} | {p['mixed_stored']} | {p['mixed_failed']} "
                     f"| {p['mixed_escalated']} | {p['mixed_calls']} | {per:.2f} | {p['mixed_wall_s']:.1f} |")
    return "\n".join(lines) + "\n"


def _scalars(figures: dict) -> str:
    return json.dumps({k: v for k, v in figures.items() if not isinstance(v, list)})


async def main(seconds: float, small: int, args: list[str], write: bool) -> None:
    if shutil.which("bwrap") is None:
        print("note: bubblewrap is not installed; the sandbox runs degraded (same scrubbing path)", file=sys.stderr)
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-resilience-"))
    (base / "stack").mkdir()
    (base / "work").mkdir()
    stack = start_stack(base / "stack", persistent=False)
    try:
        sandbox = {CODE: sandbox_part(seconds, at_least=5)}
        print(f"sandbox: {_scalars(sandbox[CODE])}", flush=True)
        populate = {CODE: await populate_part(stack, base / "work", small)}
        print(f"populate: {_scalars(populate[CODE])}", flush=True)
    finally:
        stack.stop()
        if not os.environ.get("BAMBOO_BENCH_KEEP"):
            shutil.rmtree(base, ignore_errors=True)
    text = report(sandbox, populate, seconds, small, args)
    print(text)
    if write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="how long small sandbox runs are measured, per phase")
    ap.add_argument("--small", type=int, default=20, help="one-incident batches measured per phase")
    ap.add_argument("--write", action="store_true", help=f"store the output in {RESULTS.relative_to(ROOT)}")
    a = ap.parse_args()
    extra = [f"--seconds {a.seconds:g}"] if a.seconds != 30.0 else []
    extra += [f"--small {a.small}"] if a.small != 20 else []
    sys.exit(asyncio.run(main(a.seconds, a.small, extra, a.write)))
