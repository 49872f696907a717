"""Approval to running code (issue 25): from a signed decision to the approved block's first tool call, p50/p95,
with the time split by stage.

The real stack: the Temporal dev server, Postgres, the production worker in a process of its own (the sandbox
with bubblewrap where the host has it, its warm pool), the PanDA simulator and a scripted OpenAI-compatible
model. ``--sessions`` sessions each ask for one read-only block (``/tool``, new code: no intent call, no reuse
match) and wait for its review; then, one session at a time, the client signs a ``run_once`` decision and sends
it as an update (``decide``), and the benchmark waits for the run's reply before the next one (plus ``--gap``
seconds, so one run's summary and audit never overlap the next decision).

Per session, on one clock (the server, the worker and the sandboxed child share the host's):

- *send*: the client, just before ``execute_update``; *returned*: when the update's answer came back;
- from the workflow's history (``fetch_history``): the update accepted and completed, and each activity the
  decision led to before the run (policy context, audit, …: scheduled, started, completed), then
  ``execute_code`` scheduled and started;
- *code running*: the block's first statement reads the clock (``time.time()`` in the child);
- *first tool call*: when the sandbox bridge received the block's first call, from that call's audit row
  (its ``at`` less the ``duration_ms`` the bridge measured from the frame's arrival);
- *decision row*: when the decision's ``decision_accepted`` audit row was written, and whether it was in the
  table before the first tool call.

    .venv/bin/python -m bench.approval.run [--sessions 20] [--latency 0.05] [--gap 1.0] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.enums.v1 import EventType

from bamboo.approvals.keys import KeyStore
from bamboo.investigation import client as inv
from bamboo.investigation.contract import Ack, Message
from bamboo.panda.simulator.server import PandaSimulator
from bamboo.temporal_client import connect
from policy.approvers import Role
from policy.decisions import DecisionKind, OperatorDecision
from tests.services import ROOT, start_stack, worker_env
from tests.support.scripted_llm import ScriptedLLMServer, schema_router
from bench.run_facts import commit
from bench.stats import p50, p95
from worker.services import build_services

RESULTS = Path(__file__).with_name("results.md")
TASK_ID = 40112233
# The block every session approves: it reads the clock first (when the code started running), then one tool.
CODE = ("import time\nstarted = time.time()\nt = await tools.get_task_details(task_id=task_id)\n"
        "return {'started': started, 'status': t['status']}")
POLL_S = 0.05
E = EventType


@dataclass
class Activity:
    name: str
    scheduled: float
    started: float | None = None
    completed: float | None = None


@dataclass
class Approval:
    session: str
    send: float = 0.0
    returned: float = 0.0
    accepted: float = 0.0
    update_completed: float = 0.0
    before_run: list[Activity] = field(default_factory=list)
    run: Activity | None = None
    code_running: float = 0.0
    first_call: float = 0.0
    decision_row: float = 0.0
    row_before_call: bool = False

    def stages(self) -> list[tuple[str, float]]:
        """(stage, seconds) from the send to the first tool call, in order; they add up to the whole."""
        out = [("client send -> update accepted (event)", self.accepted - self.send)]
        mark = self.accepted
        for act in [*self.before_run, self.run]:
            assert act is not None and act.started is not None
            out.append((f"-> {act.name} scheduled (workflow task)", act.scheduled - mark))
            out.append((f"{act.name}: scheduled -> started (queue)", act.started - act.scheduled))
            if act is self.run:
                break
            assert act.completed is not None
            out.append((f"{act.name}: started -> completed", act.completed - act.started))
            mark = act.completed
        assert self.run is not None and self.run.started is not None
        out.append(("execute_code started -> code running", self.code_running - self.run.started))
        out.append(("code running -> first tool call (bridge)", self.first_call - self.code_running))
        return out


def scripted_model():
    return schema_router({
        "InvestigationIntent": lambda request: {"intent": "tool", "confidence": 0.9, "reason": "a question"},
        "InvestigationCode": lambda request: {"code": CODE, "summary": "reads the task", "strategy": "lookup",
                                              "trigger_signals": [], "reason": ""},
        "InvestigationSummary": lambda request: {"reply": "done", "result_summary": "done"},
    })


def spawn_worker(settings, log: Path) -> subprocess.Popen:
    env = worker_env(settings)
    env["BAMBOO_PANDA_API_URL"] = settings.panda_api_url
    env["BAMBOO_PANDA_MONITOR_URL"] = settings.panda_monitor_url
    return subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


async def _until(probe, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = await probe()
        except inv.InvestigationError:  # no worker polls yet (it is starting)
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("the session did not get there in time (see the worker's log)")
        await asyncio.sleep(POLL_S)


async def _open(client, settings, alice, label: str) -> str:
    session = f"bench-approval-{label}-{time.monotonic_ns()}"
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "what state is the task in?", alice, force_tool=True, fresh_code=True)
    return session


async def _approve(client, session: str, bob) -> Approval:
    view = await _until(lambda: inv.pending(client, session))
    decision = OperatorDecision(turn=view.turn, code_hash=view.code_hash, kind=DecisionKind.RUN_ONCE, approver="bob",
                                review=view.review)
    signed = bob.sign(Message.DECIDE, session, decision)
    handle = inv.handle(client, session)
    approval = Approval(session=session, send=time.time())
    ack = await handle.execute_update(Message.DECIDE, signed, result_type=Ack)
    approval.returned = time.time()
    assert ack.accepted, ack

    async def replied():
        return [e for e in await inv.transcript(client, session) if e.kind == "reply" and e.turn == view.turn]
    await _until(replied)
    return approval


def _at(event) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


async def _history(client, approval: Approval) -> None:
    history = await inv.handle(client, approval.session).fetch_history()
    by_id: dict[int, Activity] = {}
    for event in history.events:
        kind = event.event_type
        if kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            approval.accepted = _at(event)
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            approval.update_completed = _at(event)
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and approval.accepted and approval.run is None:
            act = Activity(event.activity_task_scheduled_event_attributes.activity_type.name, _at(event))
            by_id[event.event_id] = act
            if act.name == "execute_code":
                approval.run = act
            else:
                approval.before_run.append(act)
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = by_id.get(event.activity_task_started_event_attributes.scheduled_event_id)
            if started is not None:
                started.started = _at(event)
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = by_id.get(event.activity_task_completed_event_attributes.scheduled_event_id)
            if done is not None:
                done.completed = _at(event)


async def _rows(pool, approval: Approval, started: float) -> None:
    approval.code_running = started
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT kind, at, body FROM audit WHERE (kind = 'decision_accepted' AND body->>'session' = %s) "
            "OR (kind = 'tool_call' AND run_id LIKE %s) ORDER BY seq",
            (approval.session, f"investigate:{approval.session}:%"))).fetchall()
    decision = next(r for r in rows if r[0] == "decision_accepted")
    call = next(r for r in rows if r[0] == "tool_call")
    approval.decision_row = decision[1].timestamp()
    approval.first_call = call[1].timestamp() - float(call[2].get("duration_ms") or 0.0) / 1000.0
    approval.row_before_call = rows.index(decision) < rows.index(call) and approval.decision_row <= call[1].timestamp()


async def measure(sessions: int, latency: float, gap: float) -> tuple[list[Approval], dict]:
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-approval-"))
    stack = start_stack(base, persistent=False)
    approvals: list[Approval] = []
    load: dict[str, float] = {}
    worker = None
    try:
        with ScriptedLLMServer(scripted_model(), latency_s=latency) as llm, \
                PandaSimulator(ROOT / "examples" / "incidents", port=0, require_token=None) as sim:
            keys = KeyStore(base / "keys")
            settings = stack.settings(stack.new_database(), llm.base_url, panda_api_url=sim.api_url,
                                      panda_monitor_url=sim.monitor_url, keys_dir=base / "keys")
            services = await build_services(settings, llm_base_url=settings.llm_base_url, pool_size=2)
            try:
                registry = stack.registry(services.store)
                people = {}
                for who, roles in {"alice": {Role.REQUEST}, "bob": {Role.APPROVE}}.items():
                    key = keys.create(who)
                    await registry.register(stack.admin, who, key.public_key, roles)
                    people[who] = inv.Speaker(who, key, deployment=settings.resolved_deployment())
                worker = spawn_worker(settings, base / "worker.log")
                client = await connect(settings)
                # Warm-up, not counted: the worker's first tasks, the sandbox pool's first child.
                for index in range(2):
                    await _approve(client, await _open(client, settings, people["alice"], f"warm{index}"), people["bob"])
                names = [await _open(client, settings, people["alice"], str(i)) for i in range(sessions)]
                for name in names:
                    await _until(lambda: inv.pending(client, name))
                await asyncio.sleep(gap)
                load["before"] = os.getloadavg()[0]
                for index, name in enumerate(names):
                    approvals.append(await _approve(client, name, people["bob"]))
                    print(f"{index + 1}/{sessions} approved: {approvals[-1].returned - approvals[-1].send:.3f} s "
                          "to the update's answer", file=sys.stderr)
                    await asyncio.sleep(gap)
                load["after"] = os.getloadavg()[0]
                for approval in approvals:
                    await _history(client, approval)
                    [run] = [e for e in await inv.transcript(client, approval.session) if e.kind == "run"]
                    await _rows(services.store.pool, approval, float(run.data["return_value"]["started"]))
                for name in names:
                    with contextlib.suppress(Exception):
                        await inv.handle(client, name).terminate("benchmark done")
            except BaseException:
                log = base / "worker.log"
                if log.exists():
                    print("worker log, last lines:\n" + "\n".join(log.read_text().splitlines()[-30:]), file=sys.stderr)
                raise
            finally:
                if worker is not None and worker.poll() is None:
                    os.killpg(worker.pid, 15)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        worker.wait(30)
                    if worker.poll() is None:
                        os.killpg(worker.pid, 9)
                await services.close()
    finally:
        stack.stop()
        shutil.rmtree(base, ignore_errors=True)
    return approvals, load


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def report(approvals: list[Approval], latency: float, gap: float, load: dict, measured: str) -> str:
    n = len(approvals)
    headline = [
        ("decide (update accepted) -> first tool call", [a.first_call - a.accepted for a in approvals]),
        ("client send -> first tool call", [a.first_call - a.send for a in approvals]),
        ("client send -> code running", [a.code_running - a.send for a in approvals]),
        ("client send -> update returned", [a.returned - a.send for a in approvals]),
        ("update accepted -> update completed (events)", [a.update_completed - a.accepted for a in approvals]),
        ("decide -> decision's audit row written", [a.decision_row - a.accepted for a in approvals]),
    ]
    lines = [
        f"{n} sessions approved one at a time (a signed `run_once` update each), commit {measured}, "
        f"scripted model {latency:g} s per call, {gap:g} s between approvals; host {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load.get('before', 0):.1f} before and {load.get('after', 0):.1f} "
        "after the approvals.",
        "",
        "| interval | p50 ms | p95 ms |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {_ms(p50(v))} | {_ms(p95(v))} |" for name, v in headline]
    lines.append("")
    before_rows = sum(a.row_before_call for a in approvals)
    lines.append(f"The decision's audit row was in the table before the run's first tool call in {before_rows} of {n}.")
    lines += ["", "By stage, from the client's send to the first tool call (each stage's own p50/p95; the stages of "
              "one approval add up to its total):", "",
              "| stage | approvals | p50 ms | p95 ms |", "|---|---:|---:|---:|"]
    by_stage: dict[str, list[float]] = defaultdict(list)
    for approval in approvals:
        for name, seconds in approval.stages():
            by_stage[name].append(seconds)
    lines += [f"| {name} | {len(v)} | {_ms(p50(v))} | {_ms(p95(v))} |" for name, v in by_stage.items()]
    return "\n".join(lines)


def write(text: str, command: str, recorded: bool) -> None:
    """results.md holds the latest run; a run written with ``--recorded`` is kept in it, under its own heading,
    until another ``--recorded`` run replaces it (the figures of earlier code, with the commit they came from)."""
    kept = ""
    if RESULTS.exists() and not recorded:
        old = RESULTS.read_text()
        start = old.find("\n## Recorded")
        kept = old[start:].strip() if start >= 0 else ""
    heading = "## Recorded (earlier code)" if recorded else "## Latest run"
    parts = ["# Approval to running code (issue 25)", "", heading, "", command, "", text, ""]
    if kept:
        parts += [kept, ""]
    RESULTS.write_text("\n".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the scripted model takes per call")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between one run's reply and the next decision")
    parser.add_argument("--write", action="store_true", help=f"store the output in {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--recorded", action="store_true",
                        help="with --write: keep this run in results.md as the recorded figures of earlier code")
    parser.add_argument("--json", type=Path, help="also write every approval's timestamps here")
    parser.add_argument("--commit", help="the commit measured, when this tree is an export of it, not a checkout")
    args = parser.parse_args()
    approvals, load = asyncio.run(measure(args.sessions, args.latency, args.gap))
    text = report(approvals, args.latency, args.gap, load, args.commit or commit())
    print(text)
    if args.json:
        args.json.write_text(json.dumps([{**a.__dict__, "before_run": [x.__dict__ for x in a.before_run],
                                          "run": a.run.__dict__ if a.run else None} for a in approvals], indent=1))
    if args.write:
        flags = "".join(f" --{k} {v:g}" for k, v, d in (("sessions", args.sessions, 20), ("latency", args.latency, 0.05),
                                                        ("gap", args.gap, 1.0)) if v != d)
        flags += " --recorded" if args.recorded else ""
        write(text, f"Command: `.venv/bin/python -m bench.approval.run{flags} --write`", args.recorded)


if __name__ == "__main__":
    main()
