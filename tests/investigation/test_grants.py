"""Durable per-procedure grants: replay with no prompt in a new session; void after a code change or revoke."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bamboo.frontends.review import grants_line
from bamboo.investigation import client as inv
from bamboo.investigation.procedures import ProcedureRepository
from policy.code_identity import code_hash
from policy.decisions import DecisionKind
from tests.investigation.conftest import (
    READ_PROC, READ_PROC_CODE, TASK_ID, entries, new_session, pending_turn, signed_grant, wait_for, wait_for_runs,
)

pytestmark = pytest.mark.usefixtures("terminate_sessions")

USE_PROC = f"r = await tools.{READ_PROC}(task_id=task_id)\nreturn {{'status': r['status']}}"
USE_PROC_AGAIN = f"result = await tools.{READ_PROC}(task_id=task_id)\nreturn {{'jobs': result['jobs']}}"


async def _open(client, settings, brain_codes, brain):
    session = new_session()
    brain.propose(*brain_codes)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    return session


async def test_durable_grant_replays_without_prompt_until_code_changes_or_revoked(ops,
        client, settings, services, running_worker, brain):

    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})

    first = await _open(client, settings, [USE_PROC], brain)
    await inv.send_message(client, first, "use the stored procedure", ops.alice)
    view = await pending_turn(client, first, 1)
    assert view.tools == [READ_PROC]
    await inv.decide_by_review(client, first, view.review, DecisionKind.AUTO_RUN, ops.bob)
    runs = await wait_for_runs(client, first, 1)
    assert runs[0].data["return_value"] == {"status": "broken"}
    grants = await repo.grants()
    assert grants[READ_PROC].granted_by == "bob"
    assert (await inv.approvals(client, first)).session_policies == {}

    second = await _open(client, settings, [USE_PROC_AGAIN, USE_PROC], brain)
    await inv.send_message(client, second, "replay it here", ops.carol)
    runs = await wait_for_runs(client, second, 1)
    assert runs[0].actor == "policy:durable_grant"
    policy = [e for e in await entries(client, second, "policy") if e.turn == 1]
    assert policy[0].data["allow_set"] == [READ_PROC]
    assert await inv.pending(client, second) is None

    await inv.revoke(client, second, READ_PROC, ops.carol)
    await wait_for(lambda: entries(client, second, "revoke"))
    assert await repo.grants() == {}
    await inv.send_message(client, second, "and again", ops.carol)
    view = await pending_turn(client, second, 2)
    assert view.reason == "new_code"
    # auto-run at once after the revocation runs the turn but leaves no grant (its answer could be one signed
    # before): the review says so up front instead of offering the grant
    revoke = (await entries(client, second, "revoke"))[0]
    assert "leaves a durable grant again" in revoke.text
    term = f"{READ_PROC}@{code_hash(READ_PROC_CODE)}"
    assert view.grants == [] and list(view.grants_withheld) == [term]
    assert datetime.now(timezone.utc) < view.grants_withheld[term] < datetime.now(timezone.utc) + timedelta(minutes=3)
    assert "leaves no grant of" in (grants_line(view) or "") and "granted again after" in (grants_line(view) or "")
    await inv.decide_by_review(client, second, view.review, DecisionKind.AUTO_RUN, ops.bob)
    await wait_for_runs(client, second, 2)
    assert await repo.grants() == {}
    audit = await _audit_kinds(services)
    assert audit.count("procedure_grant_created") == 1 and audit.count("procedure_grant_revoked") == 1  # none held


async def test_a_durable_grant_does_not_cover_the_procedure_s_changed_code(ops, client, settings, services,
                                                                           running_worker, brain):
    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    await repo.set_grant(signed_grant(ops.bob, READ_PROC, READ_PROC_CODE))
    assert READ_PROC in await repo.grants()
    changed = READ_PROC_CODE.replace("len(j)", "len(j) + 0")
    await repo.save(READ_PROC, changed, "approved", {})
    session = await _open(client, settings, [USE_PROC], brain)
    await inv.send_message(client, session, "replay once more", ops.alice)
    view = await pending_turn(client, session, 1)
    assert view.reason == "durable_grant_code_changed"


# READ_PROC's body with a walk to the script's globals spelled as a match class pattern: the same tools, so the
# same procedure name, captured again over the granted code.
MATCH_GADGET_PROC_CODE = READ_PROC_CODE.replace(
    "return", "def probe():\n    pass\nmatch probe:\n    case object(__globals__=namespace):\n"
    "        seen = len(namespace)\nreturn", 1)


async def test_a_recaptured_body_walking_globals_through_match_is_not_re_granted(
        ops, client, settings, services, running_worker, brain):
    """Issue 24: the scan never read match class patterns, so this body, re-captured under an already granted
    name, was reviewed as read-only with auto-run offered, and choosing it granted the new body."""
    from policy.code_identity import code_hash

    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    await repo.set_grant(signed_grant(ops.bob, READ_PROC, READ_PROC_CODE))
    await repo.save(READ_PROC, MATCH_GADGET_PROC_CODE, "approved", {})

    session = await _open(client, settings, [USE_PROC], brain)
    await inv.send_message(client, session, "use the stored procedure", ops.alice)
    view = await pending_turn(client, session, 1)
    assert view.reason == "durable_grant_code_changed" and not view.read_only
    assert any("__globals__" in reason for reason in view.opaque_reasons), view.opaque_reasons
    assert "auto_run" not in [c.value for c in view.choices]
    with pytest.raises(inv.InvestigationError, match="not offered"):
        await inv.decide_by_review(client, session, view.review, DecisionKind.AUTO_RUN, ops.bob)
    await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)
    await wait_for_runs(client, session, 1)
    grants = await repo.grants()
    assert grants[READ_PROC].code_hash == code_hash(READ_PROC_CODE)  # still the old body's: nothing re-granted
    assert [e for e in await entries(client, session, "grant")] == []


async def _audit_kinds(services) -> list[str]:
    async with services.store.pool.connection() as conn:
        return [r[0] for r in await (await conn.execute("SELECT kind FROM audit ORDER BY seq")).fetchall()]


async def test_a_state_changing_procedure_never_auto_runs_even_with_the_deployment_opt_in(
        ops, client, stack, database_url, llm_server, sim, keys_dir, services, brain, new_kills):
    """Issue: --allow-mutating-autorun was a client flag creating deployment-wide grants, and with the worker
    setting on, another user's new session on another task auto-ran a kill."""
    import asyncio
    import contextlib

    from tests.investigation.conftest import KILL_PROC, KILL_PROC_CODE
    from worker.main import run_worker

    settings = stack.settings(database_url, llm_server.base_url, panda_api_url=sim.api_url,
                              panda_monitor_url=sim.monitor_url, keys_dir=keys_dir, allow_mutating_autorun=True)
    repo = ProcedureRepository(services.store.pool)
    await repo.save(KILL_PROC, KILL_PROC_CODE, "approved", {})
    # A grant left behind by an earlier version of the product: it must not make the kill run unreviewed.
    await repo.set_grant(signed_grant(ops.bob, KILL_PROC, KILL_PROC_CODE))
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, services=services, stop=stop))
    try:
        session = await _open(client, settings, [f"await tools.{KILL_PROC}(task_id=task_id)"], brain)
        await inv.send_message(client, session, "use the stored procedure", ops.carol)
        view = await pending_turn(client, session, 1)
        assert view.reason == "durable_grant_state_changing" and not view.read_only
        assert "auto_run" not in [c.value for c in view.choices]
        assert [p.name for p in view.procedures] == [KILL_PROC] and "kill_task" in view.procedures[0].code
        assert new_kills() == []
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(worker, 30)


def test_mutating_auto_run_is_not_a_client_flag():
    from typer.testing import CliRunner

    from bamboo.cli.main import app

    result = CliRunner().invoke(app, ["investigate", "--task-id", "1", "--allow-mutating-autorun"])
    assert result.exit_code == 2 and "No such option" in result.output


async def test_a_grant_row_no_approver_signed_is_not_a_grant(ops, client, settings, services, running_worker, brain):
    """Review finding: a grant was three columns of `procedures`, which the store's role (a requester's too on the
    embedded stack) may write: a grant "by nobody", or by bob with no signature of his, or bob's signature on
    another procedure's grant, made the next turn replaying the procedure run with no review."""
    from datetime import UTC, datetime

    from policy.grants import ProcedureGrant, make_grant

    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    other = signed_grant(ops.bob, "proc__some_other_procedure", READ_PROC_CODE)
    forged = [
        make_grant(READ_PROC, {READ_PROC: READ_PROC_CODE}, "nobody", datetime.now(UTC)),
        make_grant(READ_PROC, {READ_PROC: READ_PROC_CODE}, "bob", datetime.now(UTC)),
        ProcedureGrant(procedure=READ_PROC, code_hash=other.code_hash, granted_by="bob", granted_at=other.granted_at,
                       session_id=other.session_id, decision=other.decision),
        signed_grant(ops.demo_requester, READ_PROC, READ_PROC_CODE),  # a requester, who may not approve
    ]
    for number, grant in enumerate(forged, start=1):
        await repo.set_grant(grant)
        session = await _open(client, settings, [USE_PROC], brain)
        await inv.send_message(client, session, "use the stored procedure", ops.carol)
        view = await pending_turn(client, session, 1)
        assert view.reason == "new_code", (number, view.reason)
    await repo.set_grant(signed_grant(ops.bob, READ_PROC, READ_PROC_CODE))
    session = await _open(client, settings, [USE_PROC], brain)
    await inv.send_message(client, session, "use the stored procedure", ops.carol)
    runs = await wait_for_runs(client, session, 1)
    assert runs[0].actor == "policy:durable_grant"


async def test_a_revoked_grant_written_back_stays_revoked(ops, client, settings, services, running_worker, brain):
    """The signed answer behind a grant stays valid after the grant is revoked: a requester who wrote the row back
    (the store's role may) would have revived it. The revocation is kept, insert-only, by the answer and term."""
    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    grant = signed_grant(ops.bob, READ_PROC, READ_PROC_CODE)
    await repo.set_grant(grant)
    assert READ_PROC in await repo.grants()
    assert await repo.clear_grant(grant)
    await repo.set_grant(grant)  # the row written back, as it was
    assert await repo.grants() == {}
    session = await _open(client, settings, [USE_PROC], brain)
    await inv.send_message(client, session, "use the stored procedure", ops.carol)
    view = await pending_turn(client, session, 1)
    assert view.reason == "new_code"
    async with services.store.pool.connection() as conn:
        with pytest.raises(Exception, match="never granted again"):
            await conn.execute("DELETE FROM revoked_grants")
    soon = signed_grant(ops.bob, READ_PROC, READ_PROC_CODE)  # anew at once: a clock running ahead could date it so
    await repo.set_grant(soon)
    assert await repo.grants() == {}  # (one signed past the window counts: tests/policy/test_signed_grants.py)


async def test_another_answer_of_a_revoked_grant_does_not_revive_it(ops, client, settings, services, running_worker,
                                                                    brain):
    """The approver's earlier auto-run answer naming the same procedure and code (another session's grant, which the
    row's later one overwrote) stays valid after the revocation: written into the row, it revived the grant."""
    from dataclasses import replace

    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    earlier = signed_grant(replace(ops.bob, ttl_s=60), READ_PROC, READ_PROC_CODE, session_id="granted-first")
    latest = signed_grant(ops.bob, READ_PROC, READ_PROC_CODE)
    await repo.set_grant(earlier)
    await repo.set_grant(latest)
    assert await repo.clear_grant(latest)
    await repo.set_grant(earlier)  # the other answer written into the row
    assert await repo.grants() == {}
    session = await _open(client, settings, [USE_PROC], brain)
    await inv.send_message(client, session, "use the stored procedure", ops.carol)
    view = await pending_turn(client, session, 1)
    assert view.reason == "new_code"
    longer = signed_grant(replace(ops.bob, ttl_s=3 * 3600), READ_PROC, READ_PROC_CODE, session_id="granted-long")
    await repo.set_grant(longer)  # signed before the revocation with a longer lifetime than the revoked answer's
    assert await repo.grants() == {}


async def test_a_revocation_records_the_grant_checked_not_the_row_as_rewritten_since(ops, services):
    """The workflow checks the grant's signature, then the revoke step recorded whatever the row held by then: a
    requester who rewrote the row in between had a term nobody uses recorded, then wrote the checked answer back."""
    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    grant = signed_grant(ops.bob, READ_PROC, READ_PROC_CODE)
    await repo.set_grant(grant)
    checked = (await repo.grants())[READ_PROC]
    async with services.store.pool.connection() as conn:
        await conn.execute("UPDATE procedures SET auto_run_code_hash = %s WHERE signature = %s", ("0" * 64, READ_PROC))
    assert await repo.clear_grant(checked)
    await repo.set_grant(grant)  # the checked answer written back
    assert await repo.grants() == {}


async def test_what_the_store_says_of_a_body_is_checked_against_the_body(services):
    """procedures.code_hash and procedure_versions are rows a requester may write: the reuse step named a body by
    the row's column (the audit and the transcript then named another), and a forged 'previous version' made the
    diff shown beside a reused or regranted body an innocuous one."""
    from bamboo.investigation.contract import ReuseQuery
    from bamboo.investigation.reuse import ProcedureMatcher
    from policy.reuse import ReuseSettings

    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {"summary": "reads the task and its jobs"})
    real = code_hash(READ_PROC_CODE)
    async with services.store.pool.connection() as conn:
        await conn.execute("UPDATE procedures SET code_hash = %s WHERE signature = %s", ("0" * 64, READ_PROC))
        await conn.execute("UPDATE procedure_versions SET code = %s WHERE code_hash = %s", ("return {}", real))
    assert await repo.versions([real]) == {}

    class Flat:
        dim, model_id = 2, "flat"

        async def embed(self, texts):
            return [[1.0, 0.0] for _ in texts]

    class NoTools:
        def list_tools(self):
            return []

    matcher = ProcedureMatcher(repo, Flat(), NoTools(), b"k" * 32, ReuseSettings())
    found = await matcher.candidates(ReuseQuery(session_id="s", request="check the task"))
    assert [(c.name, c.code_hash) for c in found.candidates] == [(READ_PROC, real)]


async def test_a_grant_row_broken_before_a_revoke_stays_revoked_when_written_back(ops, client, settings, services,
                                                                                 running_worker, brain):
    """A requester who expects a revoke breaks the grant's row (another session id: its signature no longer checks),
    so no grant is in force; the revoke found nothing ("No durable grant") and the row written back afterwards
    made the approver's answer count again."""
    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    grant = signed_grant(ops.bob, READ_PROC, READ_PROC_CODE)
    await repo.set_grant(grant)
    async with services.store.pool.connection() as conn:
        await conn.execute("UPDATE procedures SET auto_run_session = 'elsewhere' WHERE signature = %s", (READ_PROC,))
    session = await _open(client, settings, [USE_PROC], brain)
    await inv.revoke(client, session, READ_PROC, ops.carol)
    [revoke] = await wait_for(lambda: entries(client, session, "revoke"))
    assert revoke.text.startswith("revoked by carol") and READ_PROC in revoke.text, revoke.text
    await repo.set_grant(grant)  # written back as the approver signed it
    assert await repo.grants() == {}
    await inv.send_message(client, session, "use the stored procedure", ops.carol)
    assert (await pending_turn(client, session, 1)).reason == "new_code"


async def test_a_row_inserted_first_under_the_answer_s_nonce_does_not_undo_a_revocation(ops, services):
    """The revocation's row was keyed by the answer's nonce, which the grant row shows: a requester who inserted that
    key first, with no time, made the revocation's insert a no-op, and the approver's earlier answer for the same
    code, written into the row, counted again."""
    repo = ProcedureRepository(services.store.pool)
    await repo.save(READ_PROC, READ_PROC_CODE, "approved", {})
    earlier = signed_grant(ops.bob, READ_PROC, READ_PROC_CODE, session_id="granted-first")
    latest = signed_grant(ops.bob, READ_PROC, READ_PROC_CODE)
    await repo.set_grant(latest)
    checked = (await repo.grants())[READ_PROC]
    async with services.store.pool.connection() as conn:
        await conn.execute("INSERT INTO revoked_grants (nonce, term) VALUES (%s, %s)",
                           (checked.decision.auth.nonce, checked.term))
    assert await repo.clear_grant(checked)
    await repo.set_grant(earlier)
    assert await repo.grants() == {}
