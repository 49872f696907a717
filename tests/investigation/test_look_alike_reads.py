"""What a front end reads of a session is checked like what it signs (``genuine``): a requester's own workflow under a
session's id shows nothing, lists nowhere and pushes nothing off a list; a thread or page bound to a session's run
chain reads nothing of another chain that took its id after it ended.

On a Temporal dev server of its own (no Postgres, no product worker): the workflows here are answered by a test
worker, as a requester's own worker would answer hers.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from bamboo.contract import KIND, Kind
from bamboo.investigation import client as inv
from bamboo.investigation.contract import WORKFLOW_NAME
from tests.investigation.conftest import new_session, wait_for
from tests.investigation.look_alikes import FORGED_DECISION, ForgedRecord, Impostor, new_queue, start


async def _listed(client: Client, session: str) -> bool:
    """Whether the server's visibility store has the workflow yet (by attributes alone, which any starter sets)."""
    return bool([e async for e in client.list_workflows(f"{KIND.name} = '{Kind.INVESTIGATE}' AND "
                                                        f"WorkflowId = '{inv.workflow_id(session)}'")])


async def test_nothing_a_requesters_own_workflow_says_is_read_as_the_session(temporal_server):
    """Her workflow of her own type, on her own queue, under an unused session id, marked as an investigation
    awaiting approval: the transcript ("bob chose run_once"), the standing approvals (auto-run by bob), the status
    and the run status were all served to the front ends; only pending() and signing refused it."""
    client = temporal_server.client
    queue = new_queue("her-own")
    session = new_session()
    async with Worker(client, task_queue=queue, workflows=[ForgedRecord]):
        handle = await start(client, "RequestersOwnRecord", session, queue, awaiting=True)
        await wait_for(lambda: _listed(client, session))
        ops = inv.InvestigationClient(client, query_timeout_s=5)
        for read in (inv.transcript(client, session), inv.approvals(client, session), inv.status(client, session),
                     ops.transcript(session), ops.approvals(session), ops.execution_status(session),
                     ops.pending(session)):
            with pytest.raises(inv.NotASession):
                await read
        assert session not in [s.session_id for s in await ops.sessions()]
        unanswered: list[str] = []
        assert session not in [p.session_id for p in await ops.list_pending(unanswered=unanswered)] + unanswered
        await handle.terminate("test finished")


async def test_a_closed_sessions_id_taken_by_another_chain_is_not_the_session_shown(temporal_server, monkeypatch):
    """A session ended; another chain of the product's type on the product's queue took its id (a start with its
    own id-reuse policy). It is an investigation, so ``genuine`` alone lets it through; a front end that names the
    first run of the chain it showed (``first_run``) reads, lists and sends nothing of the new one."""
    client = temporal_server.client
    queue = new_queue("deployment")
    monkeypatch.setattr(inv, "SESSION_QUEUE", queue)  # this test's worker stands for the deployment's
    session = new_session()
    async with Worker(client, task_queue=queue, workflows=[Impostor]):
        ended = await start(client, WORKFLOW_NAME, session, queue, linger_s=0.1)
        await ended.result()
        ops = inv.InvestigationClient(client, query_timeout_s=5)
        shown = await ops.first_run(session)
        assert shown == ended.first_execution_run_id
        assert [e.text for e in await ops.transcript(session, first_run=shown)][:1] == [FORGED_DECISION]

        taken = await start(client, WORKFLOW_NAME, session, queue)
        assert await ops.first_run(session) == taken.first_execution_run_id != shown
        for read in (ops.transcript(session, first_run=shown), ops.approvals(session, first_run=shown),
                     ops.execution_status(session, first_run=shown), ops.pending(session, first_run=shown),
                     ops.pending_memo(session, first_run=shown),
                     inv.status(client, session, first_run=shown)):
            with pytest.raises(inv.NotThisSession):
                await read
        with pytest.raises(inv.NotThisSession):
            await ops.message(session, inv.Speaker("bob", deployment="default"), "hello", first_run=shown)
        assert [e async for e in taken.fetch_history_events()
                if e.HasField("workflow_execution_signaled_event_attributes")] == []
        await taken.terminate("test finished")


async def test_a_hundred_of_her_workflows_push_no_real_review_off_the_approvals_list(temporal_server, monkeypatch):
    """``list_pending(limit=100)`` read the first 100 workflows marked as investigations awaiting approval, newest
    first, and skipped what was not a session only after counting it: 100 of hers started after a real review hid
    it from the console's and the bot's approvals lists. The list names the type and the queue now."""
    client = temporal_server.client
    queue = new_queue("deployment")
    monkeypatch.setattr(inv, "SESSION_QUEUE", queue)  # no worker polls it: the real review is "unanswered"
    examined: list[str] = []
    real_pending = inv.pending

    async def recording(client, session_id, timeout_s=None, *pinned):
        examined.append(session_id)
        return await real_pending(client, session_id, timeout_s, *pinned)

    monkeypatch.setattr(inv, "pending", recording)
    real = new_session()
    started = [await start(client, WORKFLOW_NAME, real, queue, awaiting=True)]
    await asyncio.sleep(1.1)  # the flood is newer
    flood = [f"flood-{i:03d}-{real}" for i in range(100)]
    # half of the product's type on her own queue, half of her own type on the product's queue
    started += await asyncio.gather(*(start(client, WORKFLOW_NAME if i % 2 else "RequestersOwnRecord", name,
                                            new_queue("her-own") if i % 2 else queue, awaiting=True)
                                      for i, name in enumerate(flood)))
    try:
        async def all_listed():  # by attributes alone, as the list read them
            ids = {e.id async for e in client.list_workflows(
                f"{KIND.name} = '{Kind.INVESTIGATE}' AND ExecutionStatus = 'Running'")}
            return {inv.workflow_id(name) for name in [real, *flood]} <= ids
        await wait_for(all_listed)
        unanswered: list[str] = []
        found = await inv.InvestigationClient(client, query_timeout_s=1).list_pending(limit=100, unanswered=unanswered)
        assert found == [] and unanswered == [real] and examined == [real]
    finally:
        for handle in started:
            await handle.terminate("test finished")


async def test_reads_wait_for_a_worker_no_longer_than_the_clients_query_timeout(temporal_server, monkeypatch):
    """A session no worker answers held the console's session and grants pages for the server's whole query
    deadline per read (30 s); the client's transcript and approvals wait its query timeout."""
    client = temporal_server.client
    queue = new_queue("deployment")
    monkeypatch.setattr(inv, "SESSION_QUEUE", queue)  # nobody polls it
    session = new_session()
    handle = await start(client, WORKFLOW_NAME, session, queue)
    try:
        ops = inv.InvestigationClient(client, query_timeout_s=1)
        for read in (ops.transcript(session), ops.approvals(session)):
            began = time.monotonic()
            with pytest.raises(inv.Unanswered):
                await read
            assert time.monotonic() - began < 10
    finally:
        await handle.terminate("test finished")
