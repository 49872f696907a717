"""The console shows nothing of a workflow that is not a session, and no workflow holds its grants page.

A requester's own workflow under ``investigate:<id>``, answered by her own worker, had its story shown on the
sessions list, on the session's page ("bob chose run_once", "ok: read-only, nothing changed", an auto-run approval
by bob) and on the grants page; one workflow no worker answers held the grants page 30 s, each more another 30 s.

The production app and backend's reading paths on a Temporal dev server of its own (no Postgres: these pages read
only Temporal). A test worker on a queue the test names the deployment's stands for the product's worker.
"""

from __future__ import annotations

import re
import time

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from bamboo.contract import KIND, Kind
from bamboo.frontends.console.accounts import LocalAccounts
from bamboo.frontends.console.app import create_app
from bamboo.frontends.console.backend import ConsoleBackend
from bamboo.frontends.console.settings import ConsoleSettings
from bamboo.investigation import client as inv
from bamboo.investigation.contract import WORKFLOW_NAME
from policy.approvers import Role
from tests.investigation.conftest import new_session, wait_for
from tests.investigation.look_alikes import (
    FORGED_DECISION, FORGED_POLICY_HASH, FORGED_RUN, ForgedRecord, Impostor, new_queue, start,
)

PASSWORD = "correct horse battery"


class ReadingBackend(ConsoleBackend):
    """The production backend's reading paths on a real Temporal client (these pages need no store)."""

    def __init__(self, client: Client, query_timeout_s: float = 5.0) -> None:
        self.client = client
        self.sessions_api = inv.InvestigationClient(client, query_timeout_s=query_timeout_s)

    async def roles(self, identity):
        return [Role.APPROVE]

    async def account_identity(self, account):  # the sign-in is not what is under test
        return account


async def _pages(app, *paths: str) -> list[httpx.Response]:
    """The pages as a signed-in person gets them, on the loop the app's Temporal client runs on (as serve() runs it)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as web:
        token = re.search(r'name="csrf" value="([^"]+)"', (await web.get("/login")).text).group(1)
        await web.post("/login", data={"csrf": token, "username": "bob", "password": PASSWORD, "next": "/"})
        return [await web.get(path) for path in paths]


async def _listed(client: Client, *sessions: str) -> bool:
    ids = {e.id async for e in client.list_workflows(f"{KIND.name} = '{Kind.INVESTIGATE}'")}
    return {inv.workflow_id(s) for s in sessions} <= ids


async def test_the_pages_show_nothing_of_a_requesters_own_workflow(temporal_server, monkeypatch, tmp_path):
    client = temporal_server.client
    deployment, hers = new_queue("deployment"), new_queue("her-own")
    monkeypatch.setattr(inv, "SESSION_QUEUE", deployment)
    real, fake = new_session(), new_session()
    async with Worker(client, task_queue=deployment, workflows=[Impostor]), \
            Worker(client, task_queue=hers, workflows=[ForgedRecord]):
        session = await start(client, WORKFLOW_NAME, real, deployment)  # stands for a session of ours
        look_alike = await start(client, "RequestersOwnRecord", fake, hers, linger_s=3600)
        await wait_for(lambda: _listed(client, real, fake))

        async def told():  # her worker tells its story a moment after the start
            return await look_alike.query("transcript", 0)
        await wait_for(told)
        accounts = LocalAccounts(tmp_path / "users.json")
        accounts.add("bob", PASSWORD)
        backend = ReadingBackend(client)
        app = create_app(backend, ConsoleSettings(_env_file=None), accounts, "s" * 40)
        listing, page, grants = await _pages(app, "/sessions", f"/sessions/{fake}", "/grants")

        assert real in listing.text and fake not in listing.text
        assert page.status_code == 409 and "not an investigation run by this deployment" in page.text
        for forged in (FORGED_DECISION, FORGED_RUN, "auto_run", FORGED_POLICY_HASH):
            assert forged not in page.text
        assert fake not in grants.text
        assert [(g.session_id, g.key, g.by) for g in await backend.grants()] == [(real, FORGED_POLICY_HASH, "bob")]
        await look_alike.terminate("test finished")
        await session.terminate("test finished")


async def test_sessions_no_worker_answers_hold_the_grants_page_only_as_long_as_one_query(temporal_server, monkeypatch):
    """Four sessions on a queue nobody polls, a three-second query timeout: asked one after another with the
    server's own deadline the page took two minutes; asked together, each bounded, it takes one timeout."""
    client = temporal_server.client
    deployment = new_queue("deployment")
    monkeypatch.setattr(inv, "SESSION_QUEUE", deployment)  # no worker polls it
    stuck = [new_session() for _ in range(4)]
    handles = [await start(client, WORKFLOW_NAME, s, deployment) for s in stuck]
    try:
        await wait_for(lambda: _listed(client, *stuck))
        backend = ReadingBackend(client, query_timeout_s=3.0)
        began = time.monotonic()
        assert await backend.grants() == []
        assert time.monotonic() - began < 8.0  # one after another: 12 s at least
    finally:
        for handle in handles:
            await handle.terminate("test finished")
