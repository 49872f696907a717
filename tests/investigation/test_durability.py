"""A pending review survives a killed worker; the signed answer comes from another process and from the
temporal CLI (with the signature `bamboo sign` makes), signatures required as in production."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bamboo.investigation import client as inv
from policy.code_identity import code_hash
from tests.investigation.conftest import (
    READ_CODE, TASK_ID, kill_process_group, new_session, spawn_worker_process, wait_for,
)
from tests.services import ROOT, worker_env

pytestmark = pytest.mark.usefixtures("terminate_sessions")

TEMPORAL_CLI = Path(sys.executable).parent / "temporal"


async def _pending_turn(client, session, turn):
    async def probe():
        try:
            view = await inv.pending(client, session)
        except inv.InvestigationError:
            return None
        return view if view is not None and view.turn == turn else None
    return await wait_for(probe, timeout=90)


async def _runs(client, session, count):
    async def probe():
        runs = [e for e in await inv.transcript(client, session) if e.kind == "run"]
        return runs if len(runs) >= count else None
    return await wait_for(probe, timeout=90)


async def test_approval_survives_worker_kill_and_arrives_from_other_processes(ops, client, settings, brain, tmp_path):
    session = new_session()
    brain.propose(READ_CODE, READ_CODE)
    first = spawn_worker_process(settings, tmp_path / "worker-a.log")
    second = None
    try:
        await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
        await inv.send_message(client, session, "what state is the task in?", ops.alice)
        view = await _pending_turn(client, session, 1)
        assert view.code_hash == code_hash(READ_CODE)

        kill_process_group(first)
        second = spawn_worker_process(settings, tmp_path / "worker-b.log")

        approve = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "bamboo.cli.main", "approve", session, view.review, "y", "--as", "bob"],
            cwd=ROOT, env=worker_env(settings), capture_output=True, text=True, timeout=120,
        )
        assert approve.returncode == 0, approve.stdout + approve.stderr
        runs = await _runs(client, session, 1)
        assert runs[0].turn == 1 and runs[0].data["status"] == "ok" and runs[0].actor == "bob"

        await inv.send_message(client, session, "check it once more", ops.alice)
        view = await _pending_turn(client, session, 2)
        signed = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "sign", "decide", session, view.code_hash[:32],
                             "y", "--as", "carol", "--review", view.review[:32]],
            cwd=ROOT, env=worker_env(settings), capture_output=True, text=True, timeout=120,
        )
        assert signed.returncode == 0, signed.stdout + signed.stderr
        assert json.loads(signed.stdout)["auth"]["signer"] == "carol"
        signal = await asyncio.to_thread(
            subprocess.run,
            [str(TEMPORAL_CLI), "workflow", "signal", "--address", settings.temporal_address,
             "--namespace", settings.temporal_namespace, "--workflow-id", inv.workflow_id(session),
             "--name", "decide", "--input", signed.stdout.strip()],
            capture_output=True, text=True, timeout=60,
        )
        assert signal.returncode == 0, signal.stdout + signal.stderr
        runs = await _runs(client, session, 2)
        assert [(r.turn, r.actor) for r in runs] == [(1, "bob"), (2, "carol")]
        decisions = [e for e in await inv.transcript(client, session) if e.kind == "decision"]
        assert [(d.turn, d.actor) for d in decisions] == [(1, "bob"), (2, "carol")]
        assert all(d.data["signed"] and d.data["signature"] for d in decisions)
        assert await inv.pending(client, session) is None
    finally:
        kill_process_group(first)
        if second is not None:
            kill_process_group(second)
