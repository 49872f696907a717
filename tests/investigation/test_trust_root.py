"""Issue 24, items 1, 2 and rows written straight into the registry: who may approve is decided by
statements a pinned administrator signed, never by what a requester can run or write.

Each attack is the one reproduced against the previous code, driven through the real CLI, the temporal CLI
and a running worker against the simulator; every kill is counted at the simulator.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from bamboo.approvals.admin import sign_statement
from bamboo.approvals.keys import KeyStore
from bamboo.devstack.postgres import ensure_app_role
from bamboo.investigation import client as inv
from bamboo.store.roles import grant_app_role
from policy.approvers import Role
from policy.decisions import DecisionKind, OperatorDecision
from policy.signing import DEFAULT_DEPLOYMENT
from policy.trust_root import KeyRegistration, SignedStatement, StatementKind
from tests.investigation.conftest import KILL_CODE, TASK_ID, entries, kills, new_session, pending_turn, wait_for
from tests.services import ROOT, worker_env

pytestmark = pytest.mark.usefixtures("terminate_sessions")

TEMPORAL_CLI = Path(sys.executable).parent / "temporal"


async def _cli(settings, keys: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**worker_env(settings), "BAMBOO_KEYS_DIR": str(keys)}
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bamboo.cli.main", *args], cwd=ROOT,
                                   env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _said(done: subprocess.CompletedProcess) -> str:
    return " ".join((done.stdout + done.stderr).split())


async def _kill_waiting_for_review(ops, client, settings, brain):
    session = new_session()
    brain.propose(KILL_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "kill the task", ops.alice)
    return session, await pending_turn(client, session, 1)


async def _app_role_connection(database_url: str) -> psycopg.AsyncConnection:
    """A connection as the app's role (not the owner), with the grants the deployment gives it."""
    url = await asyncio.to_thread(ensure_app_role, database_url, "bamboo_app_trust")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as owner:
        await grant_app_role(owner, "bamboo_app_trust")
    return await psycopg.AsyncConnection.connect(url, autocommit=True)


async def _insert(conn, signed: SignedStatement, **columns) -> None:
    st = signed.statement
    values = {"statement_id": st.statement_id, "kind": st.kind.value, "subject": st.subject,
              "statement": Jsonb(st.model_dump(mode="json")), "signature": signed.signature, **columns}
    await conn.execute("INSERT INTO trust_statements (statement_id, kind, subject, statement, signature) "
                       "VALUES (%(statement_id)s, %(kind)s, %(subject)s, %(statement)s, %(signature)s)", values)


async def test_a_requester_cannot_make_herself_or_anyone_an_approver(
        stack, ops, client, settings, services, database_url, running_worker, brain, sim, tmp_path):
    session, view = await _kill_waiting_for_review(ops, client, settings, brain)
    before = len(kills(sim))
    mine = tmp_path / "requester-keys"  # the requester's machine: her own keys only
    created = await _cli(settings, mine, "keys", "create", "--as", "requester-two")
    assert created.returncode == 0, _said(created)

    # 1. `--as admin` was a label; now the signer must be a pinned administrator whose private key she holds
    for admin in ([], ["--admin", "requester-two"], ["--admin", "test-admin"], ["--admin", "admin"]):
        done = await _cli(settings, mine, "keys", "register", "requester-two", "--role", "approve_state_changing",
                          *admin)
        assert done.returncode != 0, _said(done)
        assert len(_said(done).splitlines()) == 1
    said = _said(await _cli(settings, mine, "keys", "register", "requester-two", "--role", "approve_state_changing",
                            "--admin", "requester-two"))
    assert "not a pinned administrator's key" in said
    scripted = await _cli(settings, mine, "keys", "register", "requester-two", "--role", "approve_state_changing",
                          "--admin", "requester-two", "--json")
    refused = json.loads(scripted.stdout)
    assert scripted.returncode == 1 and refused["accepted"] is False and refused["identity"] == "requester-two"
    assert "not a pinned administrator's key" in refused["refusal"]

    # ... so she writes the rows herself, as the app role, in every shape the old table accepted
    her = KeyStore(mine).load("requester-two")
    as_carol = KeyStore(mine).create("carol-lookalike")
    conn = await _app_role_connection(database_url)
    try:
        own = sign_statement(her, StatementKind.REGISTER_KEY, "requester-two",
                             KeyRegistration(public_key=her.public_key, roles=(Role.APPROVE_STATE_CHANGING,)),
                             deployment=DEFAULT_DEPLOYMENT)
        await _insert(conn, own)  # signed by her own key
        claimed = SignedStatement(statement=own.statement.model_copy(update={
            "statement_id": "1" * 32, "signer": "test-admin", "key_id": stack.admin.key_id}), signature=own.signature)
        await _insert(conn, claimed)  # naming the pinned administrator as signer
        genuine = sign_statement(stack.admin, StatementKind.REGISTER_KEY, "reader",
                                 KeyRegistration(public_key=ops.keys.load("reader").public_key, roles=(Role.REQUEST,)),
                                 deployment=DEFAULT_DEPLOYMENT)
        altered = SignedStatement(statement=genuine.statement.model_copy(update={
            "statement_id": "2" * 32, "subject": "carol",
            "body": {**genuine.statement.body, "public_key": as_carol.public_key,
                     "roles": ["approve_state_changing"]}}), signature=genuine.signature)
        await _insert(conn, altered)  # a genuine statement re-aimed at carol with her key (the old upsert)
        staging = sign_statement(stack.admin, StatementKind.REGISTER_KEY, "requester-two",
                                 KeyRegistration(public_key=her.public_key, roles=(Role.APPROVE_STATE_CHANGING,)),
                                 deployment="staging")
        await _insert(conn, staging)  # the same administrator's registration of her in staging, copied here
        await conn.execute("INSERT INTO trust_statements (statement_id, kind, subject, statement, signature) "
                           "VALUES ('3333', 'register_key', 'requester-two', '{}', 'x')")  # not even a statement
        # nor can she remove or rewrite what an administrator signed (a revocation, say)
        for sql in ("DELETE FROM trust_statements", "UPDATE trust_statements SET subject = 'x'",
                    "TRUNCATE trust_statements"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(sql)
    finally:
        await conn.close()

    listed = await _cli(settings, mine, "keys", "list", "--json")
    assert listed.returncode == 0, _said(listed)
    registry = json.loads(listed.stdout)
    assert "requester-two" not in {k["identity"] for k in registry["keys"]}
    carol = next(k for k in registry["keys"] if k["identity"] == "carol")
    assert carol["public_key"] == ops.keys.load("carol").public_key
    assert len(registry["ignored"]) == 5
    assert any("signed for the deployment 'staging'" in row["reason"] for row in registry["ignored"]), registry

    # her approvals, as herself and as carol with her key, are refused by the session
    own_approval = await _cli(settings, mine, "approve", session, view.review, "y", "--as", "requester-two")
    assert own_approval.returncode != 0 and "No key is registered for requester-two" in _said(own_approval)
    KeyStore(mine).path("carol-lookalike").rename(KeyStore(mine).path("carol"))
    as_other = await _cli(settings, mine, "approve", session, view.review, "y", "--as", "carol")
    assert as_other.returncode != 0 and "is not the key registered for carol" in _said(as_other)
    assert len(kills(sim)) == before and await inv.pending(client, session) is not None


async def test_a_front_end_speaks_only_for_the_people_in_its_scope(
        stack, ops, client, settings, services, running_worker, brain, sim, tmp_path):
    """2. A front-end key signed a decision 'for' another registered approver and the retry ran."""
    fe = KeyStore(tmp_path / "fe").create("chat-bot")
    await stack.registry(services.store).register(stack.admin, "chat-bot", fe.public_key, [Role.FRONT_END],
                                                  speaks_for=["reader"])
    session, view = await _kill_waiting_for_review(ops, client, settings, brain)
    before = len(kills(sim))
    decision = OperatorDecision(turn=view.turn, code_hash=view.code_hash, kind=DecisionKind.RUN_ONCE,
                                approver="carol", review=view.review)
    payload = inv.Speaker("carol", fe, deployment=settings.resolved_deployment()).sign("decide", session, decision).model_dump_json(exclude_none=True)
    done = await asyncio.to_thread(subprocess.run, [
        str(TEMPORAL_CLI), "workflow", "signal", "--address", settings.temporal_address, "--namespace",
        settings.temporal_namespace, "--workflow-id", inv.workflow_id(session), "--name", "decide", "--input",
        payload], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

    async def refused():
        found = await entries(client, session, "refused_decision")
        return found or None
    found = await wait_for(refused)
    assert found[0].data["refusal"] == "out_of_scope"
    assert len(kills(sim)) == before and await inv.pending(client, session) is not None


async def test_a_deployment_of_its_own_refuses_to_start_with_the_demos_administrator(settings, tmp_path):
    """8. The demo's keys sit side by side for one person; a real deployment must not inherit them."""
    from bamboo.approvals.admin import DEMO_ADMIN, pin

    demo = KeyStore(tmp_path / "keys").create(DEMO_ADMIN)
    pinned = tmp_path / "admin-keys"
    pin(pinned, demo.identity, demo.public_key)
    env = {**worker_env(settings), "BAMBOO_ADMIN_KEYS_FILE": str(pinned)}
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "worker"], cwd=ROOT, env=env,
                                   capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("bamboo worker:") and "pins the embedded demo's administrator (demo-admin)" in last


async def test_a_key_rotated_in_the_second_it_was_registered_is_the_one_in_force(stack, services, tmp_path):
    """Issue times are whole seconds: the registry dates a statement after every earlier one about its subject, so
    a rotation straight after a registration (a leaked key replaced at once) is the latest, not a tie the fold
    must refuse to guess (policy.trust_root.fold_registry)."""
    registry = stack.registry(services.store)
    keys = KeyStore(tmp_path / "keys")
    leaked, fresh = keys.create("rotated-now"), KeyStore(tmp_path / "other").create("rotated-now")
    for _ in range(3):
        await registry.register(stack.admin, "rotated-now", leaked.public_key, [Role.APPROVE])
        await registry.register(stack.admin, "rotated-now", fresh.public_key, [Role.APPROVE])
        assert [k.public_key for k in await registry.active() if k.identity == "rotated-now"] == [fresh.public_key]
    assert await registry.revoke(stack.admin, "rotated-now")
    assert all(k.identity != "rotated-now" for k in await registry.active())
