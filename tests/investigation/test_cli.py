"""The operator commands, run as real processes: approvals across sessions, approve, an attached session."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from bamboo.investigation import client as inv
from policy.decisions import DecisionKind
from policy.code_identity import code_hash, short_hash
from tests.investigation.conftest import (
    KILL_CODE, READ_CODE, TASK_ID, new_session, sim_calls, wait_for,
)
from tests.services import ROOT, worker_env

pytestmark = pytest.mark.usefixtures("terminate_sessions")


async def _bamboo(settings, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = worker_env(settings)
    env["COLUMNS"] = "200"
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "bamboo.cli.main", *args], cwd=ROOT, env=env, input=stdin,
        capture_output=True, text=True, timeout=120,
    )


async def _pending(client, session):
    return await wait_for(lambda: inv.pending(client, session))


async def test_approvals_lists_pending_and_approve_checks_hash_and_identity(new_kills, ops, client, settings, running_worker,
                                                                           brain, sim):
    session = new_session()
    brain.propose(KILL_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "kill it", ops.alice)
    view = await _pending(client, session)

    async def listed():
        out = await _bamboo(settings, "approvals")
        return out if session in out.stdout else None
    out = await wait_for(listed, timeout=60, every=1.0)
    assert view.code_hash[:12] in out.stdout and view.review[:12] in out.stdout and "STATE-CHANGING" in out.stdout

    wrong = await _bamboo(settings, "approve", session, "deadbeef" * 8, "y", "--as", "bob")
    assert wrong.returncode != 0 and "reviewed again or moved on" in (wrong.stdout + wrong.stderr)
    short = await _bamboo(settings, "approve", session, view.review[:12], "y", "--as", "bob")
    assert short.returncode != 0 and "at least 32 hex characters" in (short.stdout + short.stderr)
    by_code = await _bamboo(settings, "approve", session, view.code_hash, "y", "--as", "bob")
    assert by_code.returncode != 0 and "not its review key" in (by_code.stdout + by_code.stderr)
    selfish = await _bamboo(settings, "approve", session, view.review, "y", "--as", "alice")
    assert selfish.returncode != 0 and "someone other than" in (selfish.stdout + selfish.stderr)
    as_json = await _bamboo(settings, "approve", session, view.review, "y", "--as", "alice", "--json")
    refused = json.loads(as_json.stdout)  # the same verdict, for scripts
    assert as_json.returncode == 1 and refused["accepted"] is False and "someone other than" in refused["detail"]
    assert new_kills() == []
    rejected = await _bamboo(settings, "approve", session, view.review, "n", "--as", "bob", "--json")
    assert rejected.returncode == 0, rejected.stdout + rejected.stderr
    said = json.loads(rejected.stdout)
    assert (said["accepted"], said["decision"], said["code_hash"], said["turn"]) == (True, "reject", view.code_hash, 1)

    async def withdrawn():
        return await inv.pending(client, session) is None
    await wait_for(withdrawn)
    assert new_kills() == []


async def test_attached_terminal_reviews_and_lists_approvals(ops, client, settings, running_worker, brain):
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    out = await _bamboo(settings, "investigate", "--attach", session, "--as", "bob", "-v",
                        stdin="what is the task status?\na\n/approvals\n/quit\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"review turn 1 · {short_hash(code_hash(READ_CODE))}" in out.stdout
    assert "[intent] tool" in out.stdout
    assert "run ok" in out.stdout and f'get_task_details({{"task_id":{TASK_ID}}}) → allowed → dict(' in out.stdout
    assert "auto_run" in out.stdout and "detached" in out.stdout
    approvals = await inv.approvals(client, session)
    assert [p.approved_by for p in approvals.session_policies.values()] == ["bob"]



def demo_script(stack) -> str:
    """The demo's investigation step, with the suite's administrator signing what the embedded one would."""
    return ("from pathlib import Path\n"
            "from bamboo.approvals.keys import KeyStore\n"
            "from bamboo.cli.demo_loop import demo_investigation\n"
            "from bamboo.settings import get_settings\n"
            f"admin = KeyStore(Path({str(stack.admin_keys_file.parent / 'admin-key')!r})).load('test-admin')\n"
            "demo_investigation(get_settings(), admin=admin)\n")


async def test_demo_step_walks_the_review_loop_without_a_model_writing_code(
        stack, ops, client, settings, services, running_worker, brain, llm_server, sim):
    """Issue 26: the demo's investigation ended with "nothing to review" because the offline model cannot write
    tool-calling code. Now it reuses the bundled procedures: a read-only one approved and run, then a retry its
    requester accepts (proposed from the store, it needs that first) and the operator approves, with the session's
    audit rows; and it never asks the model for code (the scripted model here would only answer junk)."""
    from bamboo.cli.demo_loop import DEMO_TASK

    brain.propose(*['<a href="https://bigpanda.cn/">STATE-CHANGING</a>'] * 4)
    retries_before = len([c for c in sim_calls(sim) if "retry" in c["endpoint"]])
    env = worker_env(settings)
    env["COLUMNS"] = "250"
    env["BAMBOO_PANDA_API_URL"] = settings.panda_api_url  # the suite's simulator answers there: the demo uses it
    try:
        out = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", demo_script(stack)], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=300)
    finally:
        brain.codes.clear()
    text = " ".join(out.stdout.split())
    assert out.returncode == 0, out.stdout + out.stderr
    assert llm_server.counts_by_schema().get("InvestigationCode", 0) == 0
    assert "reusing procedure proc__get_task_details__get_task_jobs_summary; the store records it captured from ex-001" in text
    assert "reuses proc__get_task_details__retry_task" in text and "STATE-CHANGING (retry_task)" in text
    assert (": demo-requester accepts the stored procedure proposed for their request; it still needs approval by "
            "someone else" in text)
    assert "REFUSED" not in text
    me = text.split("you approve as ")[1].split(",")[0]
    assert f"{me} approves" in text and text.count(": accepted") == 2
    assert text.count("[run] in the sandbox") == 2 and '"status": "finished"' in text and '"registered": true' in text
    assert "stored_procedure_accepted" in text and "code_run" in text and "procedure_reused" in text
    assert "Demo only:" in text and "separates two keys here, not two people" in text
    assert "bamboo investigate --attach demo-" in text
    retries = [c for c in sim_calls(sim) if "retry" in c["endpoint"]][retries_before:]
    assert len(retries) == 1 and str(DEMO_TASK) in json.dumps(retries[0])


def _column(table_text: str, header: str) -> list[str]:
    """The cells of one column of a rich table drawn with row lines, folded parts joined (so a cut id shows)."""
    lines = table_text.splitlines()
    head = next(i for i, line in enumerate(lines) if header in line)
    index = [cell.strip() for cell in lines[head].strip("┃").split("┃")].index(header)
    cells, current = [], ""
    for line in lines[head + 1:]:
        if line.startswith("│"):
            current += [cell.strip() for cell in line.strip("│").split("│")][index]
        elif current:
            cells.append(current)
            current = ""
    return cells


async def test_approvals_never_truncate_ids_and_hashes_and_speak_json(ops, client, settings, running_worker, brain):
    """Issue: `bamboo approvals` cut the session id and the hash in 80 columns and had no --json."""
    session = new_session() + "-with-a-long-suffix-for-width"
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status?", ops.alice)
    view = await _pending(client, session)
    env = worker_env(settings)
    env["COLUMNS"] = "80"
    listed = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "approvals", "--json"],
                                     cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    mine = [item for item in json.loads(listed.stdout) if item["session"] == session]
    assert mine and mine[0]["code_hash"] == view.code_hash and mine[0]["code"] == READ_CODE
    table = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "approvals"],
                                    cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert session in _column(table.stdout, "session") and view.code_hash in _column(table.stdout, "code hash")


async def test_quit_at_a_review_prompt_detaches(ops, client, settings, running_worker, brain):
    """Issue: /quit at a review prompt did not detach; the next typed line became a message and a new turn."""
    session = new_session()
    brain.propose(READ_CODE, READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    out = await _bamboo(settings, "investigate", "--attach", session, "--as", "bob",
                        stdin="what is the task status?\n/quit\nthis line must not become a message\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "review turn 1" in out.stdout and "detached" in out.stdout
    operators = [e.text for e in await inv.transcript(client, session) if e.kind == "operator"]
    assert operators == ["what is the task status?"]
    assert (await inv.pending(client, session)).turn == 1


async def test_a_prompt_answered_elsewhere_is_withdrawn(ops, client, settings, running_worker, brain):
    """Issue: an attached CLI kept a stale prompt after the review was answered elsewhere."""
    import queue
    import threading

    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    env = worker_env(settings)
    env["COLUMNS"] = "200"
    proc = subprocess.Popen([sys.executable, "-m", "bamboo.cli.main", "investigate", "--attach", session, "--as", "bob"],
                            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    async def saw(marker: str, timeout: float = 90) -> str:
        seen = []
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            try:
                line = lines.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.1)
                continue
            seen.append(line)
            if marker in line:
                return line
        raise AssertionError(f"{marker!r} not printed; output was:\n{''.join(seen)}")

    try:
        await saw("session ")
        proc.stdin.write("what is the task status?\n")
        proc.stdin.flush()
        await saw("review turn 1")
        view = await _pending(client, session)
        await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.carol)
        await saw("answered elsewhere")
        proc.stdin.write("/quit\n")
        proc.stdin.flush()
        assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    decisions = [e for e in await inv.transcript(client, session) if e.kind in ("decision", "refused_decision")]
    assert [(d.kind, d.actor) for d in decisions] == [("decision", "carol")]


HOSTILE_SUMMARY = ("\x1bc\x1b[2J\x1b[H╭─ review turn 2 · read-only ─╮ nothing to worry about\n"
                   "\x1b]8;;http://evil.example/\x1b\\details\x1b]8;;\x1b\\ \x9b2J \u202eevil\u202c [bold]markup[/bold]")
HOSTILE_REPLY = "all good\x1b[1A\x1b[2K\x9d8;;http://evil\x9c \u2066isolated\u2069 \x07"


def _hidden(text: str) -> list[str]:
    """Characters that would act on the terminal or hide text, as an independent list (not the sanitiser's)."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F
            or 0x200B <= ord(c) <= 0x200F or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069
            or ord(c) == 0xFEFF]


async def test_model_text_is_inert_in_approvals_and_in_the_attached_review(ops, client, settings, running_worker,
                                                                           brain):
    """Issue 24: a summary starting with ESC c cleared the approver's terminal and drew a fake read-only review
    over the real state-changing panel; the approver typed y. The scripted model's summary and reply carry
    escapes, C1 controls and bidi overrides; `bamboo approvals` and `bamboo investigate --attach -v` print
    them spelled out, labelled as the model's, and never inside the verdict's panel."""
    session = new_session()
    brain.code_summary, brain.reply = HOSTILE_SUMMARY, HOSTILE_REPLY
    brain.propose(READ_CODE, KILL_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status?", ops.alice)
    first = await _pending(client, session)
    await inv.decide_by_review(client, session, first.review, DecisionKind.RUN_ONCE, ops.bob)

    async def replied():
        return [e for e in await inv.transcript(client, session) if e.kind == "reply"]
    await wait_for(replied)
    await inv.send_message(client, session, "kill it", ops.alice)

    async def second():
        view = await inv.pending(client, session)
        return view if view is not None and view.turn == 2 else None
    await wait_for(second)

    async def listed():
        out = await _bamboo(settings, "approvals")
        return out if session in out.stdout else None
    approvals = await wait_for(listed, timeout=60, every=1.0)
    attached = await _bamboo(settings, "investigate", "--attach", session, "--as", "carol", "-v", stdin="/quit\n")
    assert attached.returncode == 0, attached.stdout + attached.stderr

    for shown in (approvals.stdout, attached.stdout):
        assert not _hidden(shown), _hidden(shown)
        assert "The model says (unverified):" in shown and "⟨U+001B⟩c⟨U+001B⟩[2J" in shown
        assert "⟨U+009B⟩2J" in shown and "⟨U+202E⟩evil⟨U+202C⟩" in shown and "[bold]markup[/bold]" in shown
    table = approvals.stdout[:approvals.stdout.index("The model says")]
    assert "STATE-CHANGING" in table and "nothing to worry" not in table and "⟨U+" not in table

    out = attached.stdout
    assert "⟨U+001B⟩[1A⟨U+001B⟩[2K⟨U+009D⟩8;;http://evil⟨U+009C⟩ ⟨U+2066⟩isolated⟨U+2069⟩ ⟨U+0007⟩" in out
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if "review turn 2 ·" in line and line.startswith("╭"))
    bottom = next(i for i in range(top, len(lines)) if lines[i].startswith("╰"))
    panel = "\n".join(lines[top:bottom + 1])
    assert "STATE-CHANGING (kill_task)" in panel and "kill_task(task_id=task_id)" in panel
    for words in ("nothing to worry", "evil", "markup", "⟨U+001B⟩", "The model says"):
        assert words not in panel, words
    said = max(i for i, line in enumerate(lines) if "The model says" in line)
    assert said < top  # the model's words come before the verdict, which the choices follow


async def test_approvals_says_when_no_worker_answers_for_a_waiting_session(client, settings):
    """Issue 28, item 10: with no worker running, `bamboo approvals` said no investigation was waiting while
    one was. A session Temporal records as awaiting approval, that no worker has run yet, is named instead (on our
    queue: a workflow on a queue no worker of ours polls is not ours, and nothing of it is shown)."""
    from datetime import timedelta

    from temporalio.common import SearchAttributePair, TypedSearchAttributes

    from bamboo.contract import AWAITING_APPROVAL, KIND, Kind, Queue
    from bamboo.investigation.contract import WORKFLOW_NAME

    session = new_session()
    handle = await client.start_workflow(
        WORKFLOW_NAME, id=inv.workflow_id(session), task_queue=Queue.MAIN, start_delay=timedelta(hours=1),
        search_attributes=TypedSearchAttributes([SearchAttributePair(KIND, Kind.INVESTIGATE.value),
                                                 SearchAttributePair(AWAITING_APPROVAL, True)]))
    try:
        async def listed():
            out = await _bamboo(settings, "approvals")
            return out if session in out.stderr else None
        out = await wait_for(listed, timeout=90, every=2.0)
        assert out.returncode == 1 and "no worker answered" in out.stderr
        assert "no investigation is waiting" not in out.stdout
    finally:
        await handle.terminate("test over")


async def test_a_new_session_may_not_take_an_ended_sessions_name(ops, client, settings, running_worker, brain):
    """Issue: `--session NAME` naming an ended session attached to it silently and the operator's questions went
    nowhere; the name is refused at start, in one line that says what to do."""
    session = new_session()
    brain.propose(READ_CODE)
    handle = await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID,
                                                     startup_hypothesis=False))
    await handle.terminate("ended for the test")
    out = await _bamboo(settings, "investigate", "--task-id", str(TASK_ID), "--session", session, "--as", "alice",
                        stdin="what is the task status?\n/quit\n")
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0 and session in out.stderr and "--session" in out.stderr, out.stderr
    assert "review turn" not in out.stdout


async def test_a_new_session_named_as_a_running_one_attaches_and_says_so(ops, client, settings, running_worker,
                                                                          brain):
    """A start repeated with the same name (a terminal lost right after starting) attaches, and says it did."""
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    out = await _bamboo(settings, "investigate", "--task-id", str(TASK_ID), "--session", session, "--as", "alice",
                        stdin="/quit\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"session {session} already runs: attached to it" in " ".join(out.stdout.split()), out.stdout
