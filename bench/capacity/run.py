"""Capacity (issue 25): what one learned incident and one live investigation session cost, per unit, so
docs/capacity.md can size a deployment from measured figures.

The real stack, as the other benchmarks run it: the Temporal dev server (history in its SQLite file, so
persistence growth can be read from the file), the embedded Postgres, the production worker in a process of
its own, the PanDA simulator, a scripted OpenAI-compatible model answering after ``--latency`` seconds and a
scripted embedding endpoint with no latency. Three parts, each with a fresh worker process:

1. **Populate**: ``--incidents`` synthetic incidents (email path: two model calls each) learned by one batch at
   concurrency ``--concurrency``. Per stored incident: workflow tasks, activity tasks, local activities, history
   events and bytes, approximate billable actions (from every run's history, read back with ``fetch_history``),
   model and embedding calls, Postgres bytes (``pg_total_relation_size`` of every table, indexes and TOAST
   included, before and after) and rows, WAL bytes (``pg_current_wal_lsn`` before and after), the Temporal
   dev server's file growth, CPU by process.
2. **Live sessions**, worker with the SDK's sticky cache (1000 workflows): ``--sessions`` sessions (cumulative
   steps, e.g. 100 then 300) are started and left idle (their first audit row written, waiting for a message);
   then each is sent one message and left awaiting approval of the code the model wrote. At each step: worker
   RSS (its process tree, the sandbox's warm children included), history events and bytes per session, Postgres
   bytes and rows, Temporal file growth, CPU per session.
3. **Eviction**: the worker restarted with a sticky cache of ``--cache`` workflows (``bench/capacity/cached_worker.py``),
   every session queried once in order of age (each first query replays the session's history), then the
   newest ``--probe`` (still cached) and the oldest ``--probe`` (evicted once the cache filled) queried again,
   then every session a second time (RSS after each pass); last, a signed rejection of the pending code sent to
   the newest and to the oldest ``--probe``, timed to the update's answer. Then histories replayed offline
   (``temporalio.worker.Replayer``) in this process, timed.

    .venv/bin/python -m bench.capacity.run [--incidents 200] [--sessions 100,300] [--cache 100] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import psutil
from temporalio.client import Client
from temporalio.worker import Replayer

from bamboo.accumulation.contract import (
    POPULATE_WORKFLOW, WORKFLOW_QUEUE, PopulateInput, PopulateResult, batch_workflow_id,
)
from bamboo.approvals.keys import KeyStore
from bamboo.investigation import client as inv
from bamboo.investigation.contract import Ack, Message
from bamboo.panda.simulator.server import PandaSimulator
from bamboo.samples import generate_incidents, write_incidents
from bamboo.settings import Settings
from bamboo.temporal_client import connect
from bench.capacity.histories import HistoryCounts, activity_types, count
from bench.populate.run import cpu_seconds, wait_until_polling
from policy.approvers import Role
from policy.decisions import DecisionKind, OperatorDecision
from tests.services import ROOT, TestStack, start_stack, worker_env
from tests.support.answers import approve, canonical_labels, email_extraction
from tests.support.scripted_llm import ScriptedLLMServer, schema_router
from bench.run_facts import commit
from bench.stats import p50, p95
from worker.registry import workflow_runner
from worker.services import build_services
from workflows.investigation import Investigation

RESULTS = Path(__file__).with_name("results.md")
TASK_ID = 40112233
CODE = "t = await tools.get_task_details(task_id=task_id)\nreturn {'status': t['status']}"
SDK_CACHE = 1000  # temporalio's default max_cached_workflows, which the worker does not change
ROUND_S = 2.0  # between reads of the histories of sessions still working
PARALLEL = 16  # client calls in flight when starting, messaging or reading many sessions


def scripted_model():
    return schema_router({
        "canonical_labels": canonical_labels, "email_extraction": email_extraction, "review_verdict": approve,
        "InvestigationIntent": lambda request: {"intent": "tool", "confidence": 0.9, "reason": "a question"},
        "InvestigationCode": lambda request: {"code": CODE, "summary": "reads the task", "strategy": "lookup",
                                              "trigger_signals": [], "reason": ""},
        "InvestigationSummary": lambda request: {"reply": "done", "result_summary": "done"},
    })


# ------------------------------------------------------------------ what the parties hold
def tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


async def settled_rss(pid: int, settle_s: float = 3.0) -> int:
    """The worker tree's RSS once it is quiet: the median of five readings after ``settle_s``."""
    await asyncio.sleep(settle_s)
    readings = []
    for _ in range(5):
        readings.append(tree_rss(pid))
        await asyncio.sleep(0.5)
    return int(statistics.median(readings))


def temporal_bytes(base: Path) -> int:
    """The dev server's SQLite file with its write-ahead log."""
    return sum(p.stat().st_size for p in base.glob("temporal.db*") if p.is_file())


async def pg_state(pool) -> dict[str, Any]:
    """Bytes and rows of every table (indexes and TOAST included) and the WAL position."""
    async with pool.connection() as conn:
        tables = await (await conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 1")).fetchall()
        rows = {}
        for name, _ in tables:
            rows[name] = (await (await conn.execute(f'SELECT count(*) FROM "{name}"')).fetchone())[0]
        lsn = (await (await conn.execute("SELECT pg_current_wal_lsn()::text")).fetchone())[0]
    return {"bytes": {name: size for name, size in tables}, "rows": rows, "lsn": lsn}


async def wal_bytes(pool, before: str, after: str) -> int:
    async with pool.connection() as conn:
        return int((await (await conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)",
                                              (after, before))).fetchone())[0])


def pg_delta(before: dict, after: dict) -> dict[str, tuple[int, int]]:
    """(bytes, rows) added per table, tables that did not change left out."""
    out = {}
    for name, size in after["bytes"].items():
        grown = size - before["bytes"].get(name, 0)
        rows = after["rows"][name] - before["rows"].get(name, 0)
        if grown or rows:
            out[name] = (grown, rows)
    return out


async def gather_limited(items: list, fn: Callable[[Any], Awaitable[Any]], limit: int = PARALLEL) -> list:
    gate = asyncio.Semaphore(limit)

    async def one(item):
        async with gate:
            return await fn(item)
    return await asyncio.gather(*(one(i) for i in items))


async def history_counts(client: Client, workflow_id: str, run_id: str | None = None) -> HistoryCounts:
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    return count(history.events)


# ------------------------------------------------------------------ the worker
def spawn_worker(settings: Settings, log: Path, max_cached: int | None = None, default_gc: bool = False) -> subprocess.Popen:
    env = worker_env(settings)
    env["BAMBOO_PANDA_API_URL"] = settings.panda_api_url
    env["BAMBOO_PANDA_MONITOR_URL"] = settings.panda_monitor_url
    module = ["-m", "worker"] if max_cached is None else ["-m", "bench.capacity.cached_worker",
                                                          "--max-cached", str(max_cached)]
    module += ["--default-gc"] if default_gc and max_cached is not None else []
    return subprocess.Popen([sys.executable, *module], cwd=ROOT, env=env, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(10)


@contextlib.asynccontextmanager
async def running_worker(settings: Settings, base: Path, name: str, max_cached: int | None = None,
                         default_gc: bool = False):
    log = base / f"worker-{name}.log"
    proc = spawn_worker(settings, log, max_cached, default_gc)
    try:
        await wait_until_polling([log], [proc])
        yield proc
    except BaseException:
        if log.exists():
            print("worker log, last lines:\n" + "\n".join(log.read_text().splitlines()[-30:]), file=sys.stderr)
        raise
    finally:
        stop_worker(proc)


# ------------------------------------------------------------------ part 1: populate
async def populate(stack: TestStack, base: Path, settings: Settings, client: Client, pool, llm: ScriptedLLMServer,
                   emb: ScriptedLLMServer, incidents: int, concurrency: int) -> dict[str, Any]:
    batch_dir = base / "incidents"
    write_incidents([i.model_copy(update={"resolution_record": None}) for i in generate_incidents(incidents, seed=2026)],
                    batch_dir)
    async with running_worker(settings, base, "populate") as worker:
        pg_before = await pg_state(pool)
        temporal_before = temporal_bytes(base)
        calls_before, emb_before = llm.call_count, len(emb.embedding_inputs)
        cpu_before = cpu_seconds(stack, [worker.pid])
        batch_id = f"capacity-{time.time_ns()}"
        started = time.perf_counter()
        result: PopulateResult = await client.execute_workflow(
            POPULATE_WORKFLOW, PopulateInput(batch_id=batch_id, path=str(batch_dir), concurrency=concurrency),
            id=batch_workflow_id(batch_id), task_queue=WORKFLOW_QUEUE, result_type=PopulateResult)
        wall = time.perf_counter() - started
        cpu_after = cpu_seconds(stack, [worker.pid])
        rss = tree_rss(worker.pid)
    await asyncio.sleep(1.0)
    pg_after = await pg_state(pool)
    runs = [(w.id, w.run_id, w.workflow_type) async for w in client.list_workflows()]
    by_type: dict[str, HistoryCounts] = {}
    activities: Counter[str] = Counter()
    for wid, run_id, kind in runs:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        by_type[kind] = by_type.get(kind, HistoryCounts()) + count(history.events)
        activities += activity_types(history.events)
    return {
        "incidents": incidents, "concurrency": concurrency, "stored": result.done, "failed": result.failed,
        "wall_s": wall, "histories": by_type, "activities": activities, "llm_calls": llm.call_count - calls_before,
        "embedding_requests": len(emb.embedding_inputs) - emb_before,
        "embedded_texts": sum(len(b) for b in emb.embedding_inputs[emb_before:]),
        "pg": pg_delta(pg_before, pg_after), "wal": await wal_bytes(pool, pg_before["lsn"], pg_after["lsn"]),
        "temporal_bytes": temporal_bytes(base) - temporal_before, "rss_mb": rss / 2**20,
        "cpu": {k: cpu_after[k] - cpu_before[k] for k in cpu_after},
    }


# ------------------------------------------------------------------ part 2: live sessions
@dataclass
class Step:
    sessions: int
    state: str
    rss: int
    history: HistoryCounts
    pg: dict[str, tuple[int, int]]
    temporal_bytes: int
    cpu: dict[str, float]
    llm_calls: int
    wall_s: float
    added: int  # the sessions this step started (idle) or messaged (awaiting approval)


@dataclass
class Sessions:
    baseline_rss: int = 0
    steps: list[Step] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


async def until_settled(client: Client, names: list[str], want_activities: int, timeout_s: float = 600.0) -> HistoryCounts:
    """Wait until every session's history has no outstanding task and at least ``want_activities`` activities
    done; the sum of their counts then. Histories are read every ``ROUND_S`` (the reads cost the server CPU,
    which the per-session CPU figures include)."""
    deadline = time.monotonic() + timeout_s
    waiting = list(names)
    await asyncio.sleep(ROUND_S)
    counts: dict[str, HistoryCounts] = {}
    while waiting:
        got = await gather_limited(waiting, lambda n: history_counts(client, inv.workflow_id(n)))
        for name, c in zip(waiting, got):
            if c.settled and c.activities_closed >= want_activities:
                counts[name] = c
        waiting = [n for n in waiting if n not in counts]
        if waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(waiting)} sessions did not settle (see the worker's log)")
            await asyncio.sleep(ROUND_S)
    total = HistoryCounts()
    for c in counts.values():
        total = total + c
    return total


async def live_sessions(stack: TestStack, base: Path, settings: Settings, client: Client, pool,
                        llm: ScriptedLLMServer, alice: inv.Speaker, steps: list[int]) -> Sessions:
    out = Sessions()
    async with running_worker(settings, base, "sessions") as worker:
        # Warm-up, not counted: the Investigation workflow's first sandbox, the first model and store calls.
        warm = [f"capacity-warm-{i}" for i in range(2)]
        for name in warm:
            await inv.start(client, inv.start_input(settings, name, "alice", task_id=TASK_ID, startup_hypothesis=False))
            await inv.send_message(client, name, "what state is the task in?", alice, force_tool=True, fresh_code=True)
        await until_settled(client, warm, 2)
        out.baseline_rss = await settled_rss(worker.pid)
        for target in steps:
            new = [f"capacity-{len(out.names) + i:05d}" for i in range(target - len(out.names))]
            for state in ("idle", "awaiting approval"):
                pg_before, temporal_before = await pg_state(pool), temporal_bytes(base)
                cpu_before, calls_before = cpu_seconds(stack, [worker.pid]), llm.call_count
                started = time.perf_counter()
                if state == "idle":
                    await gather_limited(new, lambda n: inv.start(client, inv.start_input(
                        settings, n, "alice", task_id=TASK_ID, startup_hypothesis=False)))
                    out.names += new
                    history = await until_settled(client, new, 1)
                else:
                    await gather_limited(new, lambda n: inv.send_message(
                        client, n, "what state is the task in?", alice, force_tool=True, fresh_code=True))
                    deadline = time.monotonic() + 600
                    while (await client.count_workflows(inv.PENDING_QUERY)).count < len(out.names):
                        if time.monotonic() > deadline:
                            raise TimeoutError("the sessions did not all reach a review (see the worker's log)")
                        await asyncio.sleep(ROUND_S)
                    history = await until_settled(client, new, 3)
                wall = time.perf_counter() - started
                cpu_after = cpu_seconds(stack, [worker.pid])
                rss = await settled_rss(worker.pid)
                step = Step(sessions=len(out.names), state=state, rss=rss, history=history,
                            pg=pg_delta(pg_before, await pg_state(pool)),
                            temporal_bytes=temporal_bytes(base) - temporal_before,
                            cpu={k: cpu_after[k] - cpu_before[k] for k in cpu_after},
                            llm_calls=llm.call_count - calls_before, wall_s=wall, added=len(new))
                out.steps.append(step)
                print(f"{step.sessions} sessions {state}: {rss / 2**20:.0f} MB worker RSS, "
                      f"{len(new)} new in {wall:.1f} s", file=sys.stderr, flush=True)
    return out


# ------------------------------------------------------------------ part 3: eviction and replay
async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def reject(client: Client, name: str, bob: inv.Speaker) -> float:
    """Seconds from sending a signed rejection of the session's pending code (an update) to its answer; what
    the decision must name is read first from the memo the session publishes (no worker needed)."""
    memo = await inv.pending_memo(client, name)
    assert memo is not None, f"{name} has nothing pending"
    decision = OperatorDecision(turn=memo.turn, code_hash=memo.code_hash, kind=DecisionKind.REJECT, approver="bob")
    signed = bob.sign(Message.DECIDE, name, decision)
    started = time.perf_counter()
    ack = await inv.handle(client, name).execute_update(Message.DECIDE, signed, result_type=Ack)
    elapsed = time.perf_counter() - started
    assert ack.accepted, ack
    return elapsed


async def eviction(base: Path, settings: Settings, client: Client, names: list[str], cache: int, probe: int,
                   bob: inv.Speaker, default_gc: bool = False) -> dict:
    out: dict[str, Any] = {"cache": cache, "sessions": len(names), "default_gc": default_gc}
    async with running_worker(settings, base, "evict", max_cached=cache, default_gc=default_gc) as worker:
        out["rss_fresh"] = await settled_rss(worker.pid, 1.0)
        first = []
        for name in names:  # oldest first: once the cache is full, each first touch evicts the oldest
            first.append(await timed(lambda: inv.status(client, name)))
        out["rss_after"] = await settled_rss(worker.pid)
        out["first_touch"] = first[1:]  # the very first also loads the workflow's sandbox module cache
        out["cached"] = [await timed(lambda: inv.status(client, n)) for n in names[-probe:]]
        out["evicted"] = [await timed(lambda: inv.status(client, n)) for n in names[:probe]]
        # A second pass replays every session again (the cache holds the newest after it): does the memory
        # of the evicted sessions serve the next ones, or does the worker grow with every session it met?
        for name in names:
            await inv.status(client, name)
        out["rss_second"] = await settled_rss(worker.pid)
        # A person's decision, to a session still cached and to one long evicted (replayed first).
        out["decide_cached"] = [await reject(client, n, bob) for n in names[-probe:]]
        out["decide_evicted"] = [await reject(client, n, bob) for n in names[:probe]]
    replayer = Replayer(workflows=[Investigation], workflow_runner=workflow_runner())
    histories = [await inv.handle(client, n).fetch_history() for n in names[probe:2 * probe + 1]]
    await replayer.replay_workflow(histories[0])  # warm-up, as above
    offline = []
    for history in histories[1:]:
        cpu = time.process_time()
        await replayer.replay_workflow(history)
        offline.append(time.process_time() - cpu)
    out["offline_cpu"] = offline
    out["events"] = statistics.median(len(h.events) for h in histories)
    return out


# ------------------------------------------------------------------ the run
async def measure(incidents: int, concurrency: int, steps: list[int], cache: int, probe: int,
                  latency: float, default_gc: bool = False) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-capacity-"))
    stack = start_stack(base, persistent=True)
    load = [os.getloadavg()[0]]
    try:
        with ScriptedLLMServer(scripted_model(), latency_s=latency) as llm, ScriptedLLMServer() as emb, \
                PandaSimulator(ROOT / "examples" / "incidents", port=0, require_token=None) as sim:
            keys = KeyStore(base / "keys")
            settings = stack.settings(stack.new_database(), llm.base_url, panda_api_url=sim.api_url,
                                      panda_monitor_url=sim.monitor_url, keys_dir=base / "keys")
            settings = settings.model_copy(update={"embedding_base_url": emb.base_url})
            services = await build_services(settings, llm_base_url=settings.llm_base_url, pool_size=2)
            try:
                registry = stack.registry(services.store)
                people = {}
                for who, roles in {"alice": {Role.REQUEST}, "bob": {Role.APPROVE}}.items():
                    key = keys.create(who)
                    await registry.register(stack.admin, who, key.public_key, roles)
                    people[who] = inv.Speaker(who, key, deployment=settings.resolved_deployment())
                alice = people["alice"]
                client = await connect(settings)
                pool = services.store.pool
                learned = await populate(stack, base, settings, client, pool, llm, emb, incidents, concurrency)
                load.append(os.getloadavg()[0])
                print(f"populate: {learned['stored']} stored in {learned['wall_s']:.1f} s", file=sys.stderr, flush=True)
                sessions = await live_sessions(stack, base, settings, client, pool, llm, alice, steps)
                load.append(os.getloadavg()[0])
                evicted = await eviction(base, settings, client, sessions.names, cache, probe, people["bob"], default_gc)
                load.append(os.getloadavg()[0])
            finally:
                await services.close()
    finally:
        stack.stop()
        if os.environ.get("BAMBOO_BENCH_KEEP"):
            print(f"kept the run's directory (worker logs): {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    return {"populate": learned, "sessions": sessions, "eviction": evicted, "load": load, "latency": latency,
            "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


# ------------------------------------------------------------------ the report
def _kb(n: float) -> str:
    return f"{n / 1024:.1f}"


def _pg_rows(pg: dict[str, tuple[int, int]], per: int) -> list[str]:
    lines = ["| table | kB per unit (table, indexes, TOAST) | rows per unit |", "|---|---:|---:|"]
    for name, (size, rows) in sorted(pg.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"| {name} | {_kb(size / per)} | {rows / per:.2f} |")
    size = sum(s for s, _ in pg.values())
    rows = sum(r for _, r in pg.values())
    lines.append(f"| **all tables** | **{_kb(size / per)}** | **{rows / per:.2f}** |")
    return lines


def report(m: dict[str, Any], command: str) -> str:
    p, s, e = m["populate"], m["sessions"], m["eviction"]
    gc_note = ", with Python's default collector settings instead of the worker's" if e["default_gc"] else ""
    n = max(p["stored"], 1)
    total = HistoryCounts()
    for c in p["histories"].values():
        total = total + c
    lines = [
        "# Capacity: what one learned incident and one live session cost (issue 25)", "",
        command, "",
        f"Run at {m['at']}, commit {commit()}; host {platform.machine()}, {os.cpu_count()} CPUs (shared), "
        f"load average (1 min) {', '.join(f'{x:.1f}' for x in m['load'])} at the start and after each part. "
        f"Scripted model at {m['latency'] * 1000:.0f} ms per call; the Temporal dev server keeps history in its "
        "SQLite file (a cluster's persistence differs in layout, not in what is written); embedded Postgres "
        "with pgvector. Figures per unit are counts and bytes, which the load does not change; latencies and "
        "CPU are of this loaded machine.",
        "",
        f"## Per learned incident ({p['incidents']} synthetic incidents, one batch at concurrency {p['concurrency']})",
        "",
        f"{p['stored']} stored, {p['failed']} failed, in {p['wall_s']:.1f} s; worker RSS at the end "
        f"{p['rss_mb']:.0f} MB.",
        "",
        "| Temporal, per stored incident | value |", "|---|---:|",
        f"| workflow runs | {total.runs / n:.3f} |",
        f"| workflow tasks | {total.workflow_tasks / n:.3f} |",
        f"| activity tasks | {total.activities / n:.3f} |",
        f"| local activities | {total.local_activities / n:.3f} |",
        f"| timers | {total.timers / n:.3f} |",
        f"| history events | {total.events / n:.2f} |",
        f"| history bytes | {total.bytes / n:.0f} |",
        f"| billable actions (approx.) | {total.actions / n:.3f} |",
        f"| dev server SQLite growth, bytes | {p['temporal_bytes'] / n:.0f} |",
        "",
        "By workflow type (whole batch): " + "; ".join(
            f"`{kind}` {c.runs} run(s), {c.workflow_tasks} workflow tasks, {c.activities} activities, "
            f"{c.local_activities} local activities, {c.events} events"
            for kind, c in p["histories"].items()) + "; activities by type: "
        + ", ".join(f"`{name}` {k}" for name, k in p["activities"].most_common()) + ".",
        "",
        "| Model and embeddings, per stored incident | value |", "|---|---:|",
        f"| model calls (chat completions) | {p['llm_calls'] / n:.2f} |",
        f"| embedding requests | {p['embedding_requests'] / n:.2f} |",
        f"| texts embedded | {p['embedded_texts'] / n:.2f} |",
        "",
        "| CPU, ms per stored incident | " + " | ".join(p["cpu"]) + " | total |",
        "|---|" + "---:|" * (len(p["cpu"]) + 1),
        "| this run | " + " | ".join(f"{v / n * 1000:.0f}" for v in p["cpu"].values())
        + f" | {sum(p['cpu'].values()) / n * 1000:.0f} |",
        "",
        f"Postgres per stored incident (WAL written: {_kb(p['wal'] / n)} kB per incident):",
        "",
        *_pg_rows(p["pg"], n),
        "",
        "## Per live investigation session",
        "",
        f"Worker with the SDK's sticky cache ({SDK_CACHE} workflows; the worker does not change it). Sessions are "
        "started and left idle (their first audit row written, waiting for a message), then each is sent one "
        "message and left awaiting approval of the code the model wrote (one model call). Worker RSS is its "
        "process tree's (the sandbox's warm children included), settled; "
        f"{s.baseline_rss / 2**20:.0f} MB with the two warm-up sessions only. The Temporal CPU includes the "
        "benchmark's own reads of the histories while it waits for the sessions to settle; Postgres and SQLite "
        "grow by whole pages, so their per-session figures are meaningful only over a step of many sessions.",
        "",
        "| sessions | state | worker RSS MB | RSS growth per session kB (since the previous row) "
        "| history events per session | history kB per session | workflow tasks per session "
        "| activities per session | actions per session (approx.) | SQLite growth kB per session "
        "| Postgres kB per session | audit rows per session | model calls per session "
        "| CPU ms per session (worker / temporal / postgres) | wall s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    previous_rss = s.baseline_rss
    for step in s.steps:
        new, hist, cpu = step.added, step.history, step.cpu
        pg_size = sum(v[0] for v in step.pg.values())
        audit = step.pg.get("audit", (0, 0))[1]
        lines.append(
            f"| {step.sessions} | {step.state} | {step.rss / 2**20:.0f} | {(step.rss - previous_rss) / new / 1024:.0f} "
            f"| {hist.events / max(hist.runs, 1):.1f} | {_kb(hist.bytes / max(hist.runs, 1))} "
            f"| {hist.workflow_tasks / max(hist.runs, 1):.1f} | {hist.activities / max(hist.runs, 1):.1f} "
            f"| {hist.actions / max(hist.runs, 1):.1f} | {_kb(step.temporal_bytes / new)} | {_kb(pg_size / new)} "
            f"| {audit / new:.1f} | {step.llm_calls / new:.2f} "
            f"| {cpu['worker'] / new * 1000:.0f} / {cpu['temporal'] / new * 1000:.0f} / {cpu['postgres'] / new * 1000:.0f} "
            f"| {step.wall_s:.1f} |")
        previous_rss = step.rss
    idle, last = s.steps[-2], s.steps[-1]
    per_session = (last.rss - s.baseline_rss) / max(last.sessions, 1)
    lines += [
        "",
        f"Over all {last.sessions} sessions awaiting approval: worker RSS {last.rss / 2**20:.0f} MB, "
        f"{per_session / 1024:.0f} kB per cached session above the warm-up baseline.",
        "",
        f"Postgres written by the last {last.added} sessions (started, then messaged), per session:",
        "",
        *_pg_rows({k: (idle.pg.get(k, (0, 0))[0] + last.pg.get(k, (0, 0))[0],
                       idle.pg.get(k, (0, 0))[1] + last.pg.get(k, (0, 0))[1])
                   for k in set(idle.pg) | set(last.pg)}, last.added),
        "",
        f"## A session evicted from the sticky cache ({e['sessions']} sessions awaiting approval, cache of {e['cache']})",
        "",
        f"The worker restarted with `max_cached_workflows={e['cache']}` (`bench/capacity/cached_worker.py`"
        f"{gc_note}): a "
        "fresh worker has nothing cached, so each session's first query replays its whole history (fetched from "
        "the server) before it is answered, and once the cache holds its "
        f"{e['cache']} workflows each first touch evicts the least recently used. Sessions queried one at a time "
        f"(`status` query), oldest first; then the newest {len(e['cached'])} (still cached) and the oldest "
        f"{len(e['evicted'])} (evicted) again, then all of them a second time; last, a signed rejection of the "
        f"pending code (the `decide` update, answered once the decision is admitted) sent to the newest "
        f"{len(e['decide_cached'])} (cached) and to the oldest {len(e['decide_evicted'])} (evicted). "
        f"Median history length: {e['events']:.0f} events.",
        "",
        "| query to a session | queries | p50 ms | p95 ms |", "|---|---:|---:|---:|",
        f"| first touch on a fresh worker (replay) | {len(e['first_touch'])} | {p50(e['first_touch']) * 1000:.0f} "
        f"| {p95(e['first_touch']) * 1000:.0f} |",
        f"| cached | {len(e['cached'])} | {p50(e['cached']) * 1000:.0f} | {p95(e['cached']) * 1000:.0f} |",
        f"| evicted, touched again (replay) | {len(e['evicted'])} | {p50(e['evicted']) * 1000:.0f} "
        f"| {p95(e['evicted']) * 1000:.0f} |",
        f"| signed decision (reject, an update) to a cached session | {len(e['decide_cached'])} "
        f"| {p50(e['decide_cached']) * 1000:.0f} | {p95(e['decide_cached']) * 1000:.0f} |",
        f"| signed decision (reject, an update) to an evicted session | {len(e['decide_evicted'])} "
        f"| {p50(e['decide_evicted']) * 1000:.0f} | {p95(e['decide_evicted']) * 1000:.0f} |",
        f"| offline replay of one history (`Replayer`, CPU of this process) | {len(e['offline_cpu'])} "
        f"| {p50(e['offline_cpu']) * 1000:.0f} | {p95(e['offline_cpu']) * 1000:.0f} |",
        "",
        f"Worker RSS with a cache of {e['cache']}: {e['rss_fresh'] / 2**20:.0f} MB fresh, "
        f"{e['rss_after'] / 2**20:.0f} MB after all {e['sessions']} sessions were touched, "
        f"{e['rss_second'] / 2**20:.0f} MB after a second pass over all of them "
        f"(against {last.rss / 2**20:.0f} MB with all of them cached above).",
        "",
    ]
    return "\n".join(lines)


def _steps(text: str) -> list[int]:
    try:
        steps = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sessions takes increasing counts such as 100,300, not {text!r}")
    if not steps or steps != sorted(set(steps)) or steps[0] < 1:
        raise argparse.ArgumentTypeError(f"--sessions takes increasing counts such as 100,300, not {text!r}")
    return steps


DEFAULTS = {"incidents": 200, "concurrency": 32, "sessions": [100, 300], "cache": 100, "probe": 20, "latency": 0.1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=DEFAULTS["incidents"])
    parser.add_argument("--concurrency", type=int, default=DEFAULTS["concurrency"])
    parser.add_argument("--sessions", type=_steps, default=DEFAULTS["sessions"],
                        help="cumulative session counts, e.g. 100,300")
    parser.add_argument("--cache", type=int, default=DEFAULTS["cache"],
                        help="the restarted worker's max_cached_workflows (fewer than the sessions)")
    parser.add_argument("--probe", type=int, default=DEFAULTS["probe"], help="sessions queried again, cached and evicted")
    parser.add_argument("--latency", type=float, default=DEFAULTS["latency"], help="seconds per scripted model call")
    parser.add_argument("--evict-default-gc", action="store_true",
                        help="the restarted worker keeps Python's collector settings (to see what the worker's own cost)")
    parser.add_argument("--write", action="store_true", help=f"store the output in {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    if args.cache >= args.sessions[-1]:
        parser.error("--cache must be below the last --sessions count, or nothing is evicted")
    m = asyncio.run(measure(args.incidents, args.concurrency, args.sessions, args.cache, args.probe, args.latency,
                            args.evict_default_gc))
    flags = "".join(f" --{k} {','.join(map(str, v)) if isinstance(v, list) else f'{v:g}'}"
                    for k, v in vars(args).items() if k in DEFAULTS and v != DEFAULTS[k])
    flags += " --evict-default-gc" if args.evict_default_gc else ""
    text = report(m, f"Command: `.venv/bin/python -m bench.capacity.run{flags} --write`")
    print(text)
    if args.write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
