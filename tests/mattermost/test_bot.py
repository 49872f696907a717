"""The Mattermost bot against a stand-in Mattermost (API v4 and websocket events on loopback), with its
production client: a session started in a thread, a review answered there by a registered approver, a
channel member who is not mapped refused and the refusal audited, the requester refused for their own
state-changing code by the session itself, an edit sent as a replacement block, /approvals and /revoke, and
--verbose narration that shows only in the thread that asked for it.
"""

from __future__ import annotations

import pytest

import re

from bamboo.investigation import client as inv
from tests.investigation.conftest import entries
from tests.mattermost.standin import wait_for_post

pytestmark = pytest.mark.usefixtures("terminate_sessions")


def run_once(review: dict) -> str:
    """The reply that runs a review's code once, as its post offers it: `y` and the review's tag."""
    found = re.search(r"`(y [a-z2-7]{6})`", review["message"])
    assert found, review["message"]
    return found[1]

TASK = 40118507  # examples/incidents/002_memory_reco_leak.json: exhausted, so PanDA accepts a kill
KILL = "r = await tools.kill_task(task_id=task_id)\nreturn {'killed': r['accepted']}"
KILL_EDITED = "t = await tools.get_task_details(task_id=task_id)\nr = await tools.kill_task(task_id=task_id)\nreturn {'was': t['status'], 'killed': r['accepted']}"


async def test_a_review_in_a_thread_counts_only_a_registered_approvers_answer(
        room, ops, client, services, running_worker, brain, new_kills):
    bot = room.bot_user.id
    root = await room.say("alice", f"investigate {TASK}")
    opened = await wait_for_post(room.standin, root["id"], "`) on task", by=bot)
    session = "mm-" + root["id"]
    assert session in opened["message"] and "by alice" in opened["message"]
    # the thread is bound to the session's run chain, named in the opening post
    assert f"opened (run `{await inv.InvestigationClient(client).first_run(session)}`)" in opened["message"]
    await wait_for_post(room.standin, root["id"], "[hypothesis]", by=bot)  # the start-up probe has run

    brain.propose(KILL)
    await room.say("alice", "kill the task", root["id"])
    first = await wait_for_post(room.standin, root["id"], "Review · turn 1", by=bot)
    assert "STATE\\-CHANGING (kill_task)" in first["message"] and "kill_task(task_id=task_id)" in first["message"]

    # alice sends back a changed block: new code, reviewed again, posted again.
    await room.say("alice", f"e\n```python\n{KILL_EDITED}\n```", root["id"])
    count = len(room.standin.thread(root["id"]))
    review = await wait_for_post(room.standin, root["id"], "Review · turn 1", by=bot, after=count - 1)
    view = await inv.pending(client, session)
    assert view.code_hash in review["message"] and "get_task_details" in review["message"]
    assert "changed since this turn was last reviewed" in review["message"]
    assert "+t = await tools.get_task_details(task_id=task_id)" in review["message"]

    # mallory is in the channel, but nobody mapped her to a registered person: the bot refuses and audits.
    await room.say("mallory", run_once(review), root["id"])
    await wait_for_post(room.standin, root["id"], "channel membership grants nothing", by=bot)
    async with services.store.pool.connection() as conn:
        audited = await (await conn.execute(
            "SELECT actor, body FROM audit WHERE kind = 'front_end_refused'")).fetchall()
    assert [(a, b["request"], b["session"], b["reason"]) for a, b in audited] == [
        (f"mattermost:{room.people['mallory'].id}", "decision", session, "unmapped_user")]

    # alice asked for (and edited) this state-changing code: the session refuses her own approval.
    await room.say("alice", run_once(review), root["id"])
    await wait_for_post(room.standin, root["id"], "someone other than the person who asked", by=bot)
    assert await inv.pending(client, session) is not None and new_kills() == []

    # bob is mapped and registered: his y runs it.
    await room.say("bob", run_once(review), root["id"])
    await wait_for_post(room.standin, root["id"], "bob chose run_once", by=bot)
    reply = await wait_for_post(room.standin, root["id"], "[reply]", by=bot)
    assert "run ok" in reply["message"] and '"killed": true' in reply["message"]
    assert len(new_kills()) == 1
    decisions = await entries(client, session, "decision")
    assert [(d.actor, d.data["signer"]) for d in decisions[-1:]] == [("bob", "test-mattermost-bot")]
    refused = await entries(client, session, "refused_decision")
    assert [(e.actor, e.data["refusal"]) for e in refused] == [("alice", "approver_is_requester")]

    await room.say("bob", "/approvals", root["id"])
    await wait_for_post(room.standin, root["id"], "No standing approvals in this session.", by=bot)
    await room.say("bob", "/revoke all", root["id"])
    await wait_for_post(room.standin, root["id"], "revoked by bob", by=bot)


async def test_verbose_narration_shows_only_in_the_thread_that_asked(room, ops, client, running_worker, brain):
    bot = room.bot_user.id
    quiet = await room.say("alice", f"investigate {TASK} --no-hypothesis")
    loud = await room.say("bob", f"investigate {TASK} --verbose --no-hypothesis")
    await wait_for_post(room.standin, quiet["id"], "`) on task", by=bot)
    await wait_for_post(room.standin, loud["id"], "verbose narration in this thread", by=bot)

    for thread, who in ((quiet, "alice"), (loud, "bob")):
        brain.propose("t = await tools.get_task_details(task_id=task_id)\nreturn {'status': t['status']}")
        await room.say(who, "what is the task's status", thread["id"])
        review = await wait_for_post(room.standin, thread["id"], "Review · turn 1", by=bot)
        await room.say("bob" if who == "alice" else "alice", run_once(review), thread["id"])
        await wait_for_post(room.standin, thread["id"], "[reply]", by=bot)

    loud_text = "\n".join(p["message"] for p in room.standin.thread(loud["id"]))
    quiet_text = "\n".join(p["message"] for p in room.standin.thread(quiet["id"]))
    for narration in ("[intent]", "[policy]", "tool `get_task_details(", "[code]"):
        assert narration in loud_text, narration
        assert narration not in quiet_text, narration
    # Visibility only: both runs went the same way.
    for thread in (quiet, loud):
        runs = await entries(client, "mm-" + thread["id"], "run")
        assert [r.data["status"] for r in runs] == ["ok"]

    await room.say("alice", "verbose on", quiet["id"])
    await wait_for_post(room.standin, quiet["id"], "Verbose narration on in this thread", by=bot)


async def test_analyze_posts_the_diagnosis_in_a_thread(room, ops, running_worker, llm_server):
    """`analyze <task>` reads the task from PanDA and runs the read-only AnalyzeTask; an unmapped member
    cannot start one."""
    from tests.analysis.answers import analysis_handler

    llm_server.handler = analysis_handler()
    bot = room.bot_user.id
    refused = await room.say("mallory", f"analyze {TASK}")
    await wait_for_post(room.standin, refused["id"], "channel membership grants nothing", by=bot)
    asked = await room.say("alice", f"analyze {TASK}")
    await wait_for_post(room.standin, asked["id"], f"Analysing task {TASK}", by=bot)
    diagnosis = await wait_for_post(room.standin, asked["id"], "root cause", by=bot, timeout=180)
    # (the status is whatever PanDA says now: another test's kill may have been applied to this task)
    assert f"**Task {TASK} (" in diagnosis["message"] and "confidence" in diagnosis["message"]


async def test_a_hostile_summary_is_posted_inert_and_apart_from_the_verdict(room, ops, client, running_worker, brain):
    """Issue 24: the review post pasted the model's summary raw into the verdict line; its links, image,
    mentions and a code fence reached the channel, and the fence swallowed the tools line."""
    import re

    from markdown_it import MarkdownIt

    bot = room.bot_user.id
    root = await room.say("alice", f"investigate {TASK} --no-hypothesis")
    await wait_for_post(room.standin, root["id"], "`) on task", by=bot)
    brain.code_summary = ("[click](http://evil.example/) ![x](http://evil.example/i.png)\n```\n"
                          "@channel @bob <http://evil.example/>\n# HEADING \x1bc\u202eevil")
    brain.propose(KILL)
    await room.say("alice", "kill the task", root["id"])
    message = (await wait_for_post(room.standin, root["id"], "Review · turn 1", by=bot))["message"]
    lines = message.split("\n")
    assert lines[1] == "**STATE\\-CHANGING (kill_task)** · asked by **alice**"
    assert lines[2].startswith("task: ") and " · waiting " in lines[2] and lines[3] == "request: kill the task"
    assert lines[4] == "tools: kill_task · may call when run: kill_task" and lines[5].startswith("policy: ")
    label = lines.index("**The model says (unverified):**")
    end = lines.index("", label)
    assert label > 3 and all(line.startswith("> ") for line in lines[label + 1:end]) and lines[end + 1] == "```text"
    assert "@" not in message and "\x1b" not in message and "\u202e" not in message and "http://" not in message
    assert not re.search(r"(?<!\\)[\[\]<]", "\n".join(lines[label:end]))
    html = MarkdownIt("commonmark").render(message)
    assert "<a " not in html and "<img" not in html and "<h1" not in html and html.count("<pre>") == 1
    assert "(at)channel (at)bob" in html and "⟨U+001B⟩c⟨U+202E⟩evil" in html


async def test_a_task_id_out_of_range_is_refused_before_panda_is_asked(room, ops):
    """Issue 28, finding 10: the bot asked PanDA for task 2**70 before any range check; the task is now
    checked where it enters, as `bamboo analyze` and the console check it."""
    asked = await room.say("alice", f"analyze {2**70}")
    await wait_for_post(room.standin, asked["id"], "jediTaskID 1180591620717411303424 is out of range",
                        by=room.bot_user.id)
