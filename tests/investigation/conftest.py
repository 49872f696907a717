"""Fixtures for the Investigation tests: the PanDA simulator, settings that point at it, a scripted model.

The model is scripted per schema: intent (tool unless the message starts with "FINDING"), code (taken
from a queue the test fills, so each turn proposes exactly the code the test wants reviewed), summary.

Operators sign everything they send, as in production: ``ops`` gives each test identity a key (made once
per test run) registered in the test's own database with the roles the deployment would give it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from bamboo.approvals.keys import KeyStore
from bamboo.investigation.client import Speaker
from bamboo.panda.simulator.server import PandaSimulator
from policy.approvers import Role
from tests.services import ROOT, worker_env
from tests.support.scripted_llm import schema_router

EXAMPLES = ROOT / "examples" / "incidents"
TASK_ID = 40112233  # examples/incidents/001_memory_deriv_ramcount_low.json
READ_CODE = "t = await tools.get_task_details(task_id=task_id)\nreturn {'status': t['status']}"
KILL_CODE = "r = await tools.kill_task(task_id=task_id)\nreturn {'killed': r['accepted']}"
READ_PROC = "proc__get_task_details__get_task_jobs_summary"
READ_PROC_CODE = ("t = await tools.get_task_details(task_id=task_id)\n"
                  "j = await tools.get_task_jobs_summary(task_id=task_id)\n"
                  "return {'status': t['status'], 'jobs': len(j)}")
KILL_PROC = "proc__get_task_details__kill_task"
KILL_PROC_CODE = ("t = await tools.get_task_details(task_id=task_id)\n"
                  "await tools.kill_task(task_id=task_id)\nreturn {'status': t['status']}")


class ScriptedInvestigator:
    """What the model answers, per schema; ``codes`` is consumed one reply per code-generation call.
    ``code_summary`` and ``reply`` are what it says about the code and about a run (a test may make them hostile)."""

    def __init__(self) -> None:
        self.codes: collections.deque[str] = collections.deque()
        self.code_summary = "scripted step"
        self.reply: str | None = None

    def propose(self, *codes: str) -> None:
        self.codes.extend(codes)

    def handler(self):
        def intent(request):
            finding = "Message: FINDING" in request.first_user
            return {"intent": "finding" if finding else "tool", "confidence": 0.9, "reason": "scripted"}

        def code(request):
            if not self.codes:
                return {"code": "", "summary": "", "strategy": "", "trigger_signals": [], "reason": "no script left"}
            return {"code": self.codes.popleft(), "summary": self.code_summary, "strategy": "lookup",
                    "trigger_signals": ["errorDialog mentions memory"], "reason": ""}

        def summary(request):
            body = json.loads(request.first_user)
            reply = self.reply if self.reply is not None else f"run {body['status']}: {json.dumps(body['return_value'])}"
            return {"reply": reply,
                    "result_summary": f"status {body['status']}"}

        return schema_router({"InvestigationIntent": intent, "InvestigationCode": code,
                              "InvestigationSummary": summary})


EVERY_ROLE = frozenset({Role.REQUEST, Role.APPROVE, Role.APPROVE_STATE_CHANGING})
# The test deployment's registry: who may ask and approve. "outsider" has a key but is not registered.
REGISTRY = {"alice": EVERY_ROLE, "bob": EVERY_ROLE, "carol": EVERY_ROLE, "reviewer": EVERY_ROLE,
            "demo-requester": frozenset({Role.REQUEST}), "reader": frozenset({Role.REQUEST, Role.APPROVE})}
UNREGISTERED = ("outsider",)


@pytest.fixture(scope="session")
def keys_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("keys")
    store = KeyStore(directory)
    for identity in (*REGISTRY, *UNREGISTERED):
        store.create(identity)
    return directory


class Operators:
    """The test identities as the CLI speaks for them: ``ops.alice`` signs with alice's key."""

    def __init__(self, keys: KeyStore, deployment: str) -> None:
        self.keys = keys
        self.deployment = deployment

    def __getattr__(self, identity: str) -> Speaker:
        return Speaker(identity.replace("_", "-"), self.keys.load(identity.replace("_", "-")), deployment=self.deployment)

    def unsigned(self, identity: str) -> Speaker:
        return Speaker(identity, deployment=self.deployment)


@pytest.fixture
async def ops(stack, services, keys_dir, settings) -> Operators:
    """Registers every test identity in this test's database (signed by the suite's pinned administrator)
    and returns their speakers."""
    registry = stack.registry(services.store)
    store = KeyStore(keys_dir)
    for identity, roles in REGISTRY.items():
        await registry.register(stack.admin, identity, store.load(identity).public_key, roles)
    return Operators(store, settings.resolved_deployment())


@pytest.fixture(scope="session")
def sim():
    with PandaSimulator(EXAMPLES, port=0, require_token=None) as simulator:
        yield simulator


@pytest.fixture
def brain(llm_server) -> ScriptedInvestigator:
    scripted = ScriptedInvestigator()
    llm_server.handler = scripted.handler()
    return scripted


@pytest.fixture
def settings(stack, database_url, llm_server, sim, keys_dir):
    """Root ``settings`` plus the simulator; signatures and a distinct approver are required (the defaults)."""
    return stack.settings(database_url, llm_server.base_url, panda_api_url=sim.api_url,
                          panda_monitor_url=sim.monitor_url, require_distinct_approver=True, keys_dir=keys_dir)


@pytest.fixture
async def terminate_sessions(client):
    """Sessions outlive a test on the shared dev server; end them so no later test's worker inherits them."""
    yield
    async for execution in client.list_workflows("BambooKind = 'investigate' AND ExecutionStatus = 'Running'"):
        with contextlib.suppress(Exception):
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).terminate("test finished")


def sim_calls(simulator: PandaSimulator) -> list[dict[str, Any]]:
    return httpx.get(f"{simulator.base_url}/sim/calls", timeout=10).json()


def kills(simulator: PandaSimulator) -> list[dict[str, Any]]:
    return [c for c in sim_calls(simulator) if "kill" in c["endpoint"]]


@pytest.fixture
def new_kills(sim):
    """Kill requests the simulator received during this test (the simulator is shared by the session)."""
    before = len(kills(sim))
    return lambda: kills(sim)[before:]


def new_session() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


async def wait_for(probe, timeout: float = 60.0, every: float = 0.2):
    """Poll an async ``probe`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(every)




async def entries(client, session, kind):
    """The session's transcript entries of one kind."""
    from bamboo.investigation import client as inv

    return [e for e in await inv.transcript(client, session) if e.kind == kind]


async def pending_turn(client, session, turn):
    """Wait until the given turn waits for review; its pending view."""
    from bamboo.investigation import client as inv

    async def probe():
        view = await inv.pending(client, session)
        return view if view is not None and view.turn == turn else None
    return await wait_for(probe)


async def wait_for_runs(client, session, count):
    """Wait until at least `count` code runs are in the transcript."""
    async def probe():
        found = await entries(client, session, "run")
        return found if len(found) >= count else None
    return await wait_for(probe)

def spawn_worker_process(settings, log: Path) -> subprocess.Popen:
    """A production worker in its own process group (so a test can SIGKILL it), pointed at the simulator."""
    env = worker_env(settings)
    env["BAMBOO_PANDA_API_URL"] = settings.panda_api_url
    env["BAMBOO_PANDA_MONITOR_URL"] = settings.panda_monitor_url
    env["BAMBOO_REQUIRE_DISTINCT_APPROVER"] = "true" if settings.require_distinct_approver else "false"
    env["BAMBOO_REQUIRE_SIGNATURES"] = "true" if settings.require_signatures else "false"
    return subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def kill_process_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def signed_grant(speaker, procedure: str, code: str, session_id: str = "granted-earlier"):
    """A durable grant of ``procedure`` on ``code`` as ``speaker``'s signed auto-run answer in an earlier session
    leaves it (a grant counts only with its approver's signature over it: policy.grants.grant_is_signed)."""
    from datetime import UTC, datetime

    from bamboo.investigation.contract import Message
    from policy.code_identity import code_hash
    from policy.decisions import DecisionKind, OperatorDecision
    from policy.grants import ProcedureGrant, grant_term

    term = grant_term(procedure, code_hash(code))
    answer = OperatorDecision(turn=1, code_hash=code_hash(f"await tools.{procedure}(task_id=task_id)"),
                              kind=DecisionKind.AUTO_RUN, approver=speaker.identity, grants=(term,))
    signed = speaker.sign(Message.DECIDE, session_id, answer)
    return ProcedureGrant(procedure=procedure, code_hash=code_hash(code), granted_by=speaker.identity,
                          granted_at=datetime.now(UTC), session_id=session_id, decision=signed)
