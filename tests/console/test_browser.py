"""The console in a real browser (Chromium through Selenium): sign in, find the pending turn, read the code,
approve, and watch the result appear; a person refused for approving their own state-changing code; and a
page that went stale refused instead of approving whatever is pending now.

Every decision is signed by the console's front-end key for the person signed in and judged by the session
against the test deployment's registry; the tests check what the session and PanDA saw, not just the page.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bamboo.investigation import client as inv
from policy.decisions import DecisionKind, OperatorDecision
from tests.console.conftest import CONSOLE_IDENTITY, sign_in
from tests.investigation.conftest import READ_CODE, TASK_ID, entries, new_session, pending_turn, wait_for

pytestmark = pytest.mark.usefixtures("terminate_sessions")

# Tasks PanDA accepts a kill for (40112233, the investigation tests' task, is broken: its kills are refused).
KILLABLE = 40118507  # examples/incidents/002_memory_reco_leak.json, status exhausted
KILLABLE_TOO = 40133412  # examples/incidents/008_site_downtime_exhausted.json, status exhausted

# A kill hidden 300 columns to the right of a harmless statement: the review must show it, wrapped and flagged.
HIDDEN_KILL = ("t = await tools.get_task_details(task_id=task_id)\n"
               "status = t['status'];" + " " * 300 + "r = await tools.kill_task(task_id=task_id)\n"
               "return {'status': status, 'killed': r['accepted']}")


async def test_an_approver_signs_in_reads_the_code_approves_and_sees_the_result(
        ops, client, settings, services, running_worker, brain, new_kills, browsers):
    session = new_session()
    brain.propose(HIDDEN_KILL)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=KILLABLE, startup_hypothesis=False))
    await inv.send_message(client, session, "kill the task if it is broken", ops.alice, force_tool=True)
    view = await pending_turn(client, session, 1)

    bob = browsers()
    await bob.get("/approvals")
    assert bob.path == "/login"
    await bob.screenshot("login")
    await sign_in(bob, "bob")
    row = await bob.wait_text(session, "#pending")
    assert view.code_hash in row and "STATE-CHANGING (kill_task)" in row
    await bob.screenshot("approvals")
    await bob.click(f"#review-{session}")
    await bob.wait_text("The code that will run")

    # Read the code: all of it, with the hidden statement on a visible line, highlighted and explained.
    assert await bob.text("#code-hash") == view.code_hash and await bob.text("#turn") == "1"
    code = await bob.text("#code")
    assert "r = await tools.kill_task(task_id=task_id)" in code
    overflow = await bob.js("const p = document.querySelector('#code pre'); return p.scrollWidth - p.clientWidth")
    assert overflow <= 0, f"the code block scrolls sideways by {overflow} px: part of it is out of view"
    hidden_visible = await bob.js("""
        const pre = document.querySelector('#code pre'), box = pre.getBoundingClientRect();
        const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
        let node; while ((node = walker.nextNode())) { if (node.textContent.includes('kill_task')) break; }
        const range = document.createRange(); range.selectNodeContents(node);
        const r = range.getBoundingClientRect();
        return r.width > 0 && r.left >= box.left && r.right <= box.right;""")
    assert hidden_visible, "the kill_task call is not inside the visible code box"
    flagged = [await bob.call(lambda e=e: e.text) for e in await bob.find_all("#code .hll")]
    assert any("kill_task" in line for line in flagged)
    notes = await bob.text("#notes")
    assert "state-changing: kill_task on line 2" in notes and "300 blank characters" in notes
    assert "kill_task" in await bob.text("#tools") and await bob.text("#requester") == "alice"
    # What the decision is about, beside the code (issue 27): the task with its status and owner as the session
    # read them, the request that led to this code, and how long it has waited.
    task = await bob.text("#task")
    assert task.startswith(f"{KILLABLE} · status ") and " · owner " in task, task
    assert await bob.text("#request") == "kill the task if it is broken"
    assert "min (since " in await bob.text("#waiting")
    assert view.policy_version in await bob.text("#policy")
    assert not await bob.find_all("#choose-auto_run"), "auto-run must not be offered for state-changing code"
    await bob.screenshot("review")

    await bob.click("#choose-run_once")
    await bob.wait_text("bob chose run once")
    reply = await bob.wait_text("run ok", ".kind-reply")
    assert '"killed": true' in reply and '"status": "exhausted"' in reply
    await bob.screenshot("session")

    assert len(new_kills()) == 1
    decisions = await entries(client, session, "decision")
    assert [(d.actor, d.data["kind"], d.data["signer"]) for d in decisions] == [("bob", "run_once", CONSOLE_IDENTITY)]
    async with services.store.pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT actor, body FROM audit WHERE kind = 'decision_accepted' AND body->>'session' = %s",
            (session,))).fetchone()
    assert row[0] == "bob" and row[1]["signer"] == CONSOLE_IDENTITY and row[1]["code_hash"] == view.code_hash


async def test_a_second_user_is_refused_for_their_own_state_changing_code(
        ops, client, running_worker, brain, new_kills, browsers):
    bob = browsers()
    await sign_in(bob, "bob")
    await bob.get("/sessions/new")
    await bob.fill("#task-id", str(KILLABLE_TOO))
    await bob.click("#no-hypothesis")
    await bob.screenshot("new-session")
    await bob.click("#start")
    await bob.wait_text("opened")
    session = bob.path.rsplit("/", 1)[-1]
    brain.propose("r = await tools.kill_task(task_id=task_id)\nreturn {'killed': r['accepted']}")
    await bob.click("#ask")
    await bob.fill("#ask-text", "kill it")
    await bob.click("#force-tool")
    await bob.screenshot("ask")
    await bob.click("#send")
    await bob.wait_text("review it", timeout=90)
    await bob.click("#open-review")
    await bob.wait_text("someone else has to approve it")
    assert await bob.text("#requester") == "bob (you)"

    await bob.click("#choose-run_once")
    refusal = await bob.wait_text("Refused (approver_is_requester)")
    assert "someone other than the person who asked for it" in refusal
    await bob.screenshot("refused")
    refused = await entries(client, session, "refused_decision")
    assert [(e.actor, e.data["refusal"]) for e in refused] == [("bob", "approver_is_requester")]
    assert await inv.pending(client, session) is not None and new_kills() == []

    alice = browsers()  # a different person may approve it
    await sign_in(alice, "alice")
    await alice.get(f"/sessions/{session}/review")
    await alice.click("#choose-run_once")
    await alice.wait_text("run ok", ".kind-reply")
    assert len(new_kills()) == 1


async def test_a_stale_pages_decision_is_refused(ops, client, settings, running_worker, brain, browsers):
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "what is the status", ops.alice, force_tool=True)
    first = await pending_turn(client, session, 1)

    bob = browsers()
    await sign_in(bob, "bob")
    await bob.get(f"/sessions/{session}/review")
    assert await bob.text("#code-hash") == first.code_hash

    # While bob reads, alice sends back different code for the same turn: bob's page is now stale.
    edited = READ_CODE.replace("{'status': t['status']}", "{'status': t['status'], 'edited': True}")
    await inv.update(client, session, "decide", OperatorDecision(
        turn=1, code_hash=first.code_hash, kind=DecisionKind.EDIT, approver="alice", replacement_code=edited),
        ops.alice)

    async def re_reviewed():
        view = await inv.pending(client, session)
        return view if view is not None and view.code_hash != first.code_hash else None
    second = await wait_for(re_reviewed)

    await bob.click("#choose-run_once")  # the page still shows the first code and hash
    refusal = await bob.wait_text("Refused (hash_mismatch)")
    assert "the code may have changed since you looked" in refusal
    assert await entries(client, session, "run") == []
    refused = await entries(client, session, "refused_decision")
    assert [(e.actor, e.data["refusal"], e.data["code_hash"]) for e in refused] == [
        ("bob", "hash_mismatch", first.code_hash)]

    # The page he is sent back to shows the current code; approving that one runs it.
    assert await bob.text("#code-hash") == second.code_hash and "'edited': True" in await bob.text("#code")
    changed = await bob.text("#edit-diff")  # what alice's edit changed, line by line
    assert "-return {'status': t['status']}" in changed and "+return {'status': t['status'], 'edited': True}" in changed
    await bob.click("#choose-run_once")
    await bob.wait_text("run ok", ".kind-reply")
    runs = await entries(client, session, "run")
    assert len(runs) == 1 and runs[0].data["code_hash"] == second.code_hash


@contextlib.contextmanager
def another_origin(framed_url: str) -> Iterator[str]:
    """A second site on 127.0.0.1 (another port, so another origin but the same site: the console's cookie goes
    with a frame's request) whose page frames ``framed_url``; yields that page's URL."""
    page = (f'<!doctype html><title>another site</title><h1>another site</h1>'
            f'<iframe id="framed" src="{framed_url}" width="900" height="700"></iframe>').encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the name http.server calls
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def _framed_document(browser, timeout: float = 20.0) -> tuple[str, str]:
    """The URL and text of the document inside ``#framed``, once the frame has navigated away from about:blank."""
    deadline = time.monotonic() + timeout
    url, text = "", ""
    while time.monotonic() < deadline:
        await browser.call(browser.driver.switch_to.frame, await browser.find("#framed"))
        try:
            url = await browser.js("return document.readyState === 'complete' ? document.URL : ''")
            text = await browser.text("body") if url and url != "about:blank" else ""
        finally:
            await browser.call(browser.driver.switch_to.default_content)
        if url and url != "about:blank":
            return url, text
        await asyncio.sleep(0.3)
    raise AssertionError(f"the frame did not finish loading within {timeout} s (last URL {url!r})")


async def test_another_origin_cannot_frame_a_signed_in_review(
        ops, client, settings, running_worker, brain, browsers, console):
    """Seen: another origin framed a signed-in review page, decision buttons and all. The console's answers say
    DENY and frame-ancestors 'none', so Chromium leaves the frame without the console's page."""
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "what is the status", ops.alice, force_tool=True)
    view = await pending_turn(client, session, 1)

    bob = browsers()
    await sign_in(bob, "bob")
    review = f"{console.url}/sessions/{session}/review"
    await bob.get(review)
    assert await bob.text("#code-hash") == view.code_hash  # signed in: at the top level the page shows

    with another_origin(review) as outside:
        await bob.get(outside)
        assert "another site" in await bob.text("h1")
        url, text = await _framed_document(bob)
    assert not url.startswith(console.url), f"the frame holds the console's page ({url})"
    assert view.code_hash not in text and "signed in as bob" not in text
    logged = " ".join(entry.get("message", "") for entry in await bob.call(bob.driver.get_log, "browser"))
    assert "frame-ancestors" in logged or "X-Frame-Options" in logged, logged[-2000:]
