"""Populate throughput: synthetic incidents through the real Temporal dev server, a real worker process
and the real Postgres, with a scripted LLM that answers after a fixed latency per call (100 ms, and 2 s).

Only this tree runs: a benchmark must run from a fresh clone with what `make install` installs, and an
older tree needs its own dependencies. Figures of earlier code are kept in `bench/populate/notes.md` as
recorded, with the commit they came from, not re-measured.

For each latency it runs concurrency 1 once (LLM-bound: minutes, and no scheduling to measure) and
concurrency 32 `--repeat` times (default 5), and reports the median run with its spread, wall time
against the ideal LLM-bound time (LLM calls × latency ÷ concurrency), the speed-up over concurrency 1,
peak worker RSS (worker process tree, sampled every 100 ms) and CPU per incident by process. The worker
runs with its own settings (its LLM concurrency is not raised for the benchmark), so the figures are what
`bamboo populate --concurrency N` gets. CPU counts only the processes this benchmark started: the worker's
tree, the Temporal dev server's, the embedded Postgres's (its postmaster and backends, including those
that exited), and this process. Embeddings come from a second scripted endpoint with no latency: the
benchmark measures orchestration against LLM latency, not the CPU cost of a local model. Incidents take
the email path (no reviewed record): two LLM calls each (extraction, then the LLM review). The dev server
keeps history in memory here; `bamboo dev up` uses its SQLite file, and production a cluster.

    .venv/bin/python -m bench.populate.run --out bench/populate/results.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

import psutil

from bamboo.accumulation.contract import (
    POPULATE_WORKFLOW, WORKFLOW_QUEUE, PopulateInput, PopulateResult, batch_workflow_id,
)
from bamboo.samples import generate_incidents, write_incidents
from bamboo.settings import Settings
from bamboo.temporal_client import connect
from tests.services import ROOT, start_stack, worker_env
from tests.support.answers import accumulation_handler
from tests.support.scripted_llm import ScriptedLLMServer

DEFAULT_REPEAT = 5
TOP = 32
# Targets at concurrency 32 (median run).
MAX_VS_IDEAL = 1.3
MIN_SPEED_UP = 15.0


def spawn_worker(settings: Settings, log: Path, root: Path = ROOT) -> subprocess.Popen:
    """A worker process of this tree, in a session of its own (its tree is what the CPU figures count)."""
    env = {**worker_env(settings), "PYTHONPATH": str(root)}
    return subprocess.Popen([sys.executable, "-m", "worker"], cwd=root, env=env, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


class PeakRss(threading.Thread):
    """Peak of the summed RSS of the worker process trees."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.roots = [psutil.Process(pid) for pid in pids]
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        procs: list[psutil.Process] = []
        tick = 0
        while not self.stop.is_set():
            try:
                # Finding children scans all of /proc (milliseconds of CPU on the benchmarked cores),
                # so the tree is refreshed once a second and only its RSS every 100 ms.
                if tick % 10 == 0:
                    procs = [p for root in self.roots for p in (root, *root.children(recursive=True))]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                procs = []
            tick += 1
            self.stop.wait(0.1)


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and everything under it, including children that already exited and were
    reaped (a Postgres backend per connection comes and goes; its time lands in the postmaster's
    children_* counters)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def postmaster_pid(pgdata: Path) -> int:
    """The embedded Postgres's postmaster: the first line of its pid file (pgserver daemonizes it, so it is
    not our child)."""
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def cpu_seconds(stack, worker_pids: list[int]) -> dict[str, float]:
    """CPU time consumed so far by each party this benchmark started, to show where a run's cost goes;
    other processes on the machine (another suite's Postgres) are not counted."""
    me = psutil.Process().cpu_times()
    return {"worker": sum(tree_cpu_seconds(pid) for pid in worker_pids),
            "temporal": tree_cpu_seconds(stack.temporal_proc.pid),
            "postgres": tree_cpu_seconds(postmaster_pid(stack.pgdata)),
            "bench+scripted LLM": me.user + me.system}


async def wait_until_polling(logs: list[Path], procs, timeout_s: float = 120.0) -> None:
    """Worker start-up (imports, connections) is not part of the batch: a fixed sleep was too short
    on a loaded machine and let start-up time and CPU leak into the measured run."""
    deadline = time.monotonic() + timeout_s
    while not all(log.exists() and "worker polling" in log.read_text() for log in logs):
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"a worker exited during start-up; see {logs}")
        if time.monotonic() > deadline:
            raise SystemExit(f"workers not polling after {timeout_s:.0f} s; see {logs}")
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # let the pollers settle


async def one_run(stack, batch_dir: Path, concurrency: int, latency_s: float, work: Path) -> dict:
    db = stack.new_database()
    with ScriptedLLMServer(accumulation_handler(), latency_s=latency_s) as llm, ScriptedLLMServer() as emb:
        settings = stack.settings(db, llm.base_url).model_copy(update={"embedding_base_url": emb.base_url})
        # A log per run: `wait_until_polling` reads it, and an older run's line must not count.
        log = work / f"worker-c{concurrency}-{time.time_ns()}.log"
        worker = spawn_worker(settings, log)
        rss = PeakRss([worker.pid])
        rss.start()
        try:
            client = await connect(settings)
            await wait_until_polling([log], [worker])
            calls_before = llm.call_count
            cpu_before = cpu_seconds(stack, [worker.pid])
            batch_id = f"bench-c{concurrency}-{time.time_ns()}"
            ideal_s = 2 * len(list(batch_dir.iterdir())) * latency_s / concurrency
            # Thirty times the ideal (at least two minutes): a batch that has not finished by then is
            # stuck, and the benchmark says so instead of waiting forever.
            limit_s = max(120.0, 30 * ideal_s)
            started = time.perf_counter()
            try:
                result: PopulateResult = await asyncio.wait_for(client.execute_workflow(
                    POPULATE_WORKFLOW, PopulateInput(batch_id=batch_id, path=str(batch_dir), concurrency=concurrency),
                    id=batch_workflow_id(batch_id), task_queue=WORKFLOW_QUEUE, result_type=PopulateResult,
                ), limit_s)
            except asyncio.TimeoutError:
                await client.get_workflow_handle(batch_workflow_id(batch_id)).terminate("benchmark time limit")
                raise SystemExit(f"{batch_id} did not finish within {limit_s:.0f} s: see the worker log {log} "
                                 "(run with BAMBOO_BENCH_KEEP=1 to keep it)") from None
            wall = time.perf_counter() - started
            cpu_after = cpu_seconds(stack, [worker.pid])
            calls = llm.call_count - calls_before
        finally:
            rss.stop.set()
            worker.terminate()
            worker.wait(30)
    ideal = calls * latency_s / concurrency
    return {"concurrency": concurrency, "latency_s": latency_s, "done": result.done,
            "failed": result.failed, "wall_s": wall, "rss_mb": rss.peak / 2**20, "llm_calls": calls,
            "ideal_s": ideal, "vs_ideal": wall / ideal, "worker_llm_concurrency": settings.llm_concurrency,
            "cpu_ms_per_incident": {k: (cpu_after[k] - cpu_before[k]) / max(result.done, 1) * 1000 for k in cpu_after}}


def _median(runs: list[dict]) -> dict:
    """The run with the median wall time, carrying the spread of all runs of its level."""
    ordered = sorted(runs, key=lambda r: r["wall_s"])
    return {**ordered[len(ordered) // 2], "runs": len(runs), "wall_min": ordered[0]["wall_s"],
            "wall_max": ordered[-1]["wall_s"], "ratios": [r["vs_ideal"] for r in runs],
            "wall_median": median(r["wall_s"] for r in runs)}


async def main(sizes: dict[float, int], out: Path | None, repeat: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-"))
    stack = start_stack(base, persistent=False)
    rows: dict[tuple[float, int], dict] = {}
    try:
        for latency, n in sizes.items():
            batch = base / f"incidents-{n}"
            if not batch.exists():
                incidents = [i.model_copy(update={"resolution_record": None})
                             for i in generate_incidents(n, seed=2026)]
                write_incidents(incidents, batch)
            runs: dict[int, list[dict]] = {}
            for concurrency in [1] + [TOP] * repeat:
                run = await one_run(stack, batch, concurrency, latency, base)
                runs.setdefault(concurrency, []).append(run)
                print(f"latency={latency}s c={concurrency}: "
                      f"{ {k: v for k, v in run.items() if k != 'cpu_ms_per_incident'} }", flush=True)
            for concurrency, of_level in runs.items():
                rows[(latency, concurrency)] = _median(of_level)
    finally:
        stack.stop()
        if os.environ.get("BAMBOO_BENCH_KEEP"):
            print(f"kept the run's directory (worker logs): {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    text = report(rows, sizes, repeat)
    print(text)
    if out:
        out.write_text(text)


def report(rows: dict[tuple[float, int], dict], sizes: dict[float, int], repeat: int) -> str:
    args = []
    if sizes != DEFAULT_SIZES:
        args.append("--sizes " + ",".join(f"{lat:g}:{n}" for lat, n in sizes.items()))
    if repeat != DEFAULT_REPEAT:
        args.append(f"--repeat {repeat}")
    worker_llm = next(iter(rows.values()))["worker_llm_concurrency"]
    lines = [
        "# Populate throughput: concurrency 32 against 1 (issues 2, 17, 25)",
        "",
        f"Command: `.venv/bin/python -m bench.populate.run{''.join(' ' + a for a in args)} --out bench/populate/results.md` "
        f"(this tree; synthetic incidents on the email path, two LLM calls each; scripted LLM at "
        f"{' and '.join(f'{lat * 1000:.0f} ms' for lat in sizes)} per call with "
        f"{' and '.join(str(n) for n in sizes.values())} incidents; the worker's own settings "
        f"(LLM concurrency {worker_llm}); this machine: {psutil.cpu_count()} cores; concurrency 1 run once, "
        f"concurrency {TOP} {repeat} time{'s' if repeat != 1 else ''}, the median run shown; "
        f"run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        "| LLM latency | incidents | concurrency | stored | failed | wall s (median) | wall s (min–max) "
        "| LLM calls | ideal s | wall ÷ ideal | speed-up vs c=1 | peak worker RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for latency, n in sizes.items():
        base_wall = rows[(latency, 1)]["wall_s"]
        for concurrency in (1, TOP):
            r = rows[(latency, concurrency)]
            spread = f"{r['wall_min']:.1f}–{r['wall_max']:.1f} ({r['runs']} runs)" if r["runs"] > 1 else "1 run"
            lines.append(f"| {latency * 1000:.0f} ms | {n} | {concurrency} | {r['done']} | {r['failed']} "
                         f"| {r['wall_s']:.1f} | {spread} | {r['llm_calls']} | {r['ideal_s']:.1f} "
                         f"| {r['vs_ideal']:.2f} | {base_wall / r['wall_s']:.1f}× | {r['rss_mb']:.0f} |")
        top = rows[(latency, TOP)]
        speed = base_wall / top["wall_s"]
        verdicts.append(
            f"- {latency * 1000:.0f} ms: wall ÷ ideal at concurrency {TOP} {top['vs_ideal']:.3f} (target ≤ {MAX_VS_IDEAL}: "
            f"{'met' if top['vs_ideal'] <= MAX_VS_IDEAL else 'NOT met'}; runs: "
            f"{', '.join(f'{x:.2f}' for x in top['ratios'])}); speed-up vs c=1 "
            f"{speed:.1f}× (target ≥ {MIN_SPEED_UP:.0f}×: {'met' if speed >= MIN_SPEED_UP else 'NOT met'}).")
    lines += ["", "Against the targets:", "", *verdicts]
    first = next(iter(rows.values()))
    parties = list(first["cpu_ms_per_incident"])
    lines += ["", "CPU per stored incident (ms), by process this benchmark started — where the cost goes (median run):", "",
              "| LLM latency | concurrency | " + " | ".join(parties) + " | total |",
              "|---|---|" + "---|" * (len(parties) + 1)]
    for (latency, concurrency), r in sorted(rows.items()):
        cpu = r["cpu_ms_per_incident"]
        lines.append(f"| {latency * 1000:.0f} ms | {concurrency} | "
                     + " | ".join(f"{cpu[k]:.0f}" for k in parties) + f" | {sum(cpu.values()):.0f} |")
    return "\n".join(lines) + "\n"


DEFAULT_SIZES = {0.1: 500, 2.0: 64}


def _sizes(text: str) -> dict[float, int]:
    try:
        pairs = [item.split(":") for item in text.split(",")]
        return {float(lat): int(n) for lat, n in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes takes LATENCY_S:INCIDENTS pairs such as 0.1:500,2:64, not {text!r}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES,
                    help="LLM latency in seconds and incidents per batch, e.g. 0.1:500,2:64 (default)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--repeat", type=int, default=DEFAULT_REPEAT,
                    help=f"runs at concurrency {TOP} (concurrency 1 runs once); the median run is reported")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    sys.exit(asyncio.run(main(a.sizes, a.out, a.repeat)))
