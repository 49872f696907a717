"""The console's other pages in a real browser: standing approvals with revoke, a populate batch paused,
resumed and cancelled from its page (each signal audited with the person's identity), a non-batch
workflow that cannot be signalled from there, the audit chain's state, intact and then broken, and the
knowledge learned (causes, their resolutions, steps and incidents), hostile names shown as text.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bamboo.contract import KIND
from bamboo.investigation import client as inv
from bamboo.accumulation.contract import PopulateInput, PopulateProgress, PopulateResult
from bamboo.frontends.inert_text import inert_terminal
from tests.console.conftest import sign_in
from tests.console.knowledge_seed import COMMON_CAUSE, COMMON_INCIDENTS, HOSTILE_CAUSE, seed
from tests.investigation.conftest import EXAMPLES, READ_CODE, TASK_ID, entries, new_session, pending_turn, wait_for

pytestmark = pytest.mark.usefixtures("terminate_sessions")


async def test_standing_approvals_are_listed_and_revoked_from_the_grants_page(
        ops, client, settings, running_worker, brain, browsers):
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status please", ops.alice, force_tool=True)
    view = await pending_turn(client, session, 1)

    bob = browsers()
    await sign_in(bob, "bob")
    await bob.get(f"/sessions/{session}/review")
    await bob.click("#choose-always_ask")
    await bob.wait_text("run ok", ".kind-reply")
    await bob.get("/grants")
    row = await bob.wait_text(view.code_hash, "#grants")
    assert "always_ask" in row and session in row and "bob" in row
    await bob.screenshot("grants")
    await bob.click("#grants button")
    await bob.wait_text("Revoke of")
    await bob.wait_text("No standing approvals", "#no-grants", timeout=30)
    revoked = await wait_for(lambda: entries(client, session, "revoke"))
    assert revoked[0].actor == "bob" and view.code_hash in revoked[0].data["session_hashes"]
    await bob.get("/sessions")
    await bob.wait_text(session, "#sessions")
    await bob.screenshot("sessions")


async def test_a_batch_is_paused_resumed_and_cancelled_from_its_page(
        ops, client, services, running_worker, browsers, console):
    batch = f"console-{uuid.uuid4().hex[:6]}"
    handle = await client.start_workflow(
        "PopulateBatch", PopulateInput(batch_id=batch, path=str(EXAMPLES), concurrency=1, paused=True),
        id=f"populate:{batch}", task_queue="bamboo", result_type=PopulateResult)

    async def progress() -> PopulateProgress:
        return await handle.query("progress", result_type=PopulateProgress)

    bob = browsers()
    await sign_in(bob, "bob")
    await bob.get("/batches")
    await bob.wait_text("paused", f"tr[data-workflow='{handle.id}'] .state")
    await bob.screenshot("batches")
    await bob.click(f"[id='resume-{handle.id}']")
    await bob.wait_text(f"{handle.id}: resume sent")
    assert not (await progress()).paused
    await bob.click(f"[id='pause-{handle.id}']")
    await bob.wait_text(f"{handle.id}: pause sent")
    assert (await progress()).paused
    await bob.click(f"[id='cancel-{handle.id}']")
    await bob.wait_text(f"{handle.id}: cancel sent")
    result = await asyncio.wait_for(handle.result(), 120)
    assert result.cancelled and result.done < 36
    # A finished batch keeps its counts on the page (issue 27): read from its result, no worker needed.
    await bob.get("/batches")
    final = await bob.wait_text("done", f"tr[data-workflow='{handle.id}'] .final")
    assert final == (f"{result.done} done, {result.skipped} skipped, {result.failed} failed of {result.total} "
                     "(cancelled)"), final

    async with services.store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT actor, body->>'signal' FROM audit WHERE kind = 'batch_control' AND body->>'workflow_id' = %s "
            "ORDER BY seq", (handle.id,))).fetchall()
    assert rows == [("bob", "resume"), ("bob", "pause"), ("bob", "cancel")]


async def test_only_batches_can_be_signalled_from_the_batches_page(
        ops, client, settings, running_worker, brain, http_clients):
    session = new_session()
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    bob = http_clients()
    await asyncio.to_thread(bob.sign_in, "bob")
    token = await asyncio.to_thread(bob.csrf, "/batches")
    sent = await asyncio.to_thread(lambda: bob.http.post("/batches/control", data={
        "csrf": token, "workflow_id": inv.workflow_id(session), "action": "cancel"}, follow_redirects=True))
    assert "is not a populate or analyze batch" in sent.text
    assert (await inv.handle(client, session).describe()).status.name == "RUNNING"


async def test_a_person_not_registered_to_run_work_cannot_control_a_batch(
        ops, client, services, running_worker, http_clients):
    """Signed in (a bound account, or anyone the identity provider lets in) is not registered: a batch signal is
    the console's own, judged by no session, so the console refuses it to anyone without the request role."""
    batch = f"console-{uuid.uuid4().hex[:6]}"
    handle = await client.start_workflow(
        "PopulateBatch", PopulateInput(batch_id=batch, path=str(EXAMPLES), concurrency=1, paused=True),
        id=f"populate:{batch}", task_queue="bamboo", result_type=PopulateResult)
    outsider = http_clients()
    await asyncio.to_thread(outsider.sign_in, "outsider")
    token = await asyncio.to_thread(outsider.csrf, "/batches")
    sent = await asyncio.to_thread(lambda: outsider.http.post("/batches/control", data={
        "csrf": token, "workflow_id": handle.id, "action": "cancel"}, follow_redirects=True))
    assert "outsider is not registered to run work here" in sent.text
    await asyncio.sleep(1)
    assert (await handle.describe()).status.name == "RUNNING"
    assert (await handle.query("progress", result_type=PopulateProgress)).paused
    async with services.store.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT actor FROM audit WHERE kind = 'batch_control' AND body->>'workflow_id' = %s", (handle.id,))).fetchall()
    assert rows == []
    await handle.terminate("test over")


async def test_the_audit_page_shows_the_chain_intact_and_then_where_it_breaks(
        ops, services, http_clients, browsers):
    bob = browsers()
    await sign_in(bob, "bob")
    await bob.get("/audit")
    intact = await bob.wait_text("Audit chain intact", "#chain")
    await bob.screenshot("audit")
    async with services.store.pool.connection() as conn:
        seq = (await (await conn.execute("SELECT min(seq) FROM audit WHERE kind = 'trust_register_key'")).fetchone())[0]
        await conn.execute("ALTER TABLE audit DISABLE TRIGGER USER")  # the table refuses rewrites: an owner's attack
        await conn.execute("UPDATE audit SET body = jsonb_set(body, '{subject}', '\"mallory\"') WHERE seq = %s", (seq,))
    broken = await bob.wait_text("broken", "#chain")
    assert f"broken at row {seq}" in broken and "modified after writing" in broken and "intact" in intact


async def test_the_knowledge_page_lists_the_causes_and_shows_one_with_where_it_came_from(services, browsers):
    """Issue 27: what was learned was visible only through `bamboo kb` and SQL. A person who holds no role
    reads it here: the causes by how many incidents name them, a filter, and one cause with its resolutions,
    steps and incidents, each with the incidents it came from; a cause named with markup stays text."""
    await seed(services.store.knowledge)
    reader = browsers()
    await sign_in(reader, "reader")
    await reader.click("#nav-knowledge")
    first = await reader.wait_text(COMMON_CAUSE, "#causes")
    assert first.index(COMMON_CAUSE) < first.index("Site in scheduled downtime") < first.index("Lost input file")
    assert f"{COMMON_CAUSE}\n{COMMON_CAUSE}, as reviewed\n{COMMON_INCIDENTS}\n" in first, first
    assert "Causes 1–6 of 6, most incidents first." == await reader.text("#count")
    spelled = inert_terminal(HOSTILE_CAUSE)
    assert spelled in first and "⟨U+202E⟩evil⟨U+202C⟩" in spelled
    # Nothing the names hold became a script, an image or a link off the console.
    planted = await reader.js("return document.querySelectorAll("
                              "'script, img, main a:not([href^=\"/\"]), b:not(#who b), strong:not(.brand)').length")
    assert planted == 0
    await reader.screenshot("knowledge")

    await reader.fill("#q", "DOWNTIME")
    await reader.click("#apply-filter")
    await reader.wait_text("matching “DOWNTIME”", "#count")
    [row] = await reader.find_all("#causes tr.cause")
    assert "Site in scheduled downtime" in await reader.call(lambda: row.text)
    await reader.click("#causes tr.cause a")
    await reader.wait_text("Site in scheduled downtime", "#cause-name")
    assert await reader.text("#incident-count") == "2"
    assert "Retry after the downtime 2 panda:40133412:exhausted, panda:40136621:finished" in \
        await reader.text("#resolutions")
    steps = await reader.text("#steps")
    assert "1 Check the site's downtime calendar 2 panda:40133412:exhausted, panda:40136621:finished" in steps
    assert "inc-40133412" in await reader.text("#incidents")
    await reader.screenshot("knowledge-cause")

    await reader.click("#back")
    await reader.wait_text(COMMON_CAUSE, "#causes")
    await reader.click("#causes tr.cause a")
    await reader.wait_text(COMMON_CAUSE, "#cause-name")
    assert await reader.text("#incidents-shown") == f"The first 50 of {COMMON_INCIDENTS}, by graph id."
    assert "and 25 more" in await reader.text("#resolutions")  # 45 incidents, the first 20 shown


@workflow.defn(name="ConsoleTestBrokenBatch")
class _BrokenBatch:
    """A workflow tagged as a batch whose progress query fails, as a batch of an older shape or one whose
    workflow task is failing does: the batches page must still render the others."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.query
    def progress(self) -> dict:
        raise ApplicationError("this batch cannot say how far it got")


async def test_a_batch_whose_progress_query_fails_does_not_break_the_batches_page(
        ops, client, services, http_clients, console):
    queue = f"broken-batch-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[_BrokenBatch],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await client.start_workflow(
            _BrokenBatch.run, id=f"populate:broken-{uuid.uuid4().hex[:6]}", task_queue=queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(KIND, "populate")]))
        try:
            visitor = http_clients()
            visitor.sign_in("bob")

            async def listed() -> str | None:
                page = await asyncio.to_thread(visitor.page, "/batches")
                assert page.status_code == 200, page.text[-2000:]
                return page.text if handle.id in page.text else None

            text = await wait_for(listed, timeout=30)
            assert "progress unavailable" in text
        finally:
            await handle.terminate()
