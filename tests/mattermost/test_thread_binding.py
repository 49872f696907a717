"""A session thread is bound to the run chain the bot opened: what takes the session's id after it ended is neither
narrated nor answered in the thread.

A thread's session ended; its id was free again for any starter whose id-reuse policy allows it (Temporal's default
does). A requester's own workflow under ``investigate:mm-<root>``, answered by her own worker: when anyone posted in
the thread after a bot restart, the bot adopted it (its own opening post is there) and narrated her worker's story
("bob chose run_once", "all clear: the kill was reverted") in the bot's voice. Another investigation taking the id
is no more the thread's session. The real bot and the real ``InvestigationClient`` on a Temporal dev server of
their own; a test worker on a queue the test names the deployment's stands for the product's worker.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.worker import Worker

from bamboo.frontends.mattermost.bot import MattermostBot
from bamboo.frontends.mattermost.users import UserMap
from bamboo.investigation import client as inv
from bamboo.investigation.contract import WORKFLOW_NAME
from bamboo.settings import Settings
from tests.investigation.look_alikes import (
    FORGED_DECISION, FORGED_NOTICE, REVEAL_S, ForgedRecord, Impostor, new_queue, start,
)
from tests.mattermost.test_units import ASKED, BOT_ID, BOT_KEY, _Chat

APPROVER = "x" * 26


def _bot(chat: _Chat, client) -> MattermostBot:
    return MattermostBot(chat, client, Settings.model_construct(deployment="default"),
                         UserMap(users={APPROVER: "xavier"}), BOT_KEY, audit=None, poll_s=0.2)  # type: ignore[arg-type]


def _opening(session: str, first_run: str) -> dict:
    return {"id": "o" * 26, "user_id": BOT_ID, "create_at": 2, "message": f"{opening_text(session, first_run)}"}


def opening_text(session: str, first_run: str) -> str:
    """The bot's opening post, naming the run chain it started (as `test_bot.py` reads it from the real bot)."""
    return f"Session `{session}` opened (run `{first_run}`) on task 1 by alice. Ask in this thread; reviews are posted here."


async def _posted_in_thread(bot: MattermostBot, root: str, message: str, at: int = 200) -> None:
    await bot.handle({"id": uuid.uuid4().hex[:26], "root_id": root, "channel_id": "c" * 26, "user_id": APPROVER,
                      "message": message, "create_at": at})


def _stop(bot: MattermostBot) -> None:
    for thread in bot.threads.values():
        if thread.task:
            thread.task.cancel()


async def test_a_restarted_bot_does_not_adopt_a_thread_whose_session_id_another_chain_took(
        temporal_server, monkeypatch):
    client = temporal_server.client
    deployment, hers = new_queue("deployment"), new_queue("her-own")
    monkeypatch.setattr(inv, "SESSION_QUEUE", deployment)
    async with Worker(client, task_queue=deployment, workflows=[Impostor]), \
            Worker(client, task_queue=hers, workflows=[ForgedRecord]):
        for taker, queue in (("RequestersOwnRecord", hers), (WORKFLOW_NAME, deployment)):
            root = uuid.uuid4().hex[:26]
            session = f"mm-{root}"
            ended = await start(client, WORKFLOW_NAME, session, deployment, linger_s=0.1)  # the thread's session
            await ended.result()
            taken = await start(client, taker, session, queue)  # the id taken again
            chat = _Chat([ASKED, _opening(session, ended.first_execution_run_id)])
            bot = _bot(chat, client)
            try:
                await _posted_in_thread(bot, root, "anything new?")
                await asyncio.sleep(REVEAL_S + 1.5)  # her story appears after a restarted bot would have adopted
            finally:
                _stop(bot)
            assert root not in bot.threads, taker
            assert not [m for m in chat.made if FORGED_DECISION.replace("_", "\\_") in m or FORGED_DECISION in m
                        or FORGED_NOTICE in m], chat.made
            assert len(chat.made) == 1 and chat.made[0].startswith("This thread no longer follows a session"), chat.made
            assert [e async for e in taken.fetch_history_events()
                    if e.HasField("workflow_execution_signaled_event_attributes")] == []
            await taken.terminate("test finished")


async def test_a_followed_thread_stops_when_its_sessions_id_holds_another_chain(temporal_server, monkeypatch):
    """The thread's own chain is adopted and narrated (the pin lets the session it opened through); when that
    session ends and another chain takes its id while the bot follows the thread, narration stops with a line
    saying so, and a reply in the thread goes nowhere."""
    client = temporal_server.client
    deployment = new_queue("deployment")
    monkeypatch.setattr(inv, "SESSION_QUEUE", deployment)
    root = uuid.uuid4().hex[:26]
    session = f"mm-{root}"
    async with Worker(client, task_queue=deployment, workflows=[Impostor]):
        own = await start(client, WORKFLOW_NAME, session, deployment)
        chat = _Chat([ASKED, _opening(session, own.first_execution_run_id)])
        bot = _bot(chat, client)
        try:
            await _posted_in_thread(bot, root, "anything new?")
            assert bot.threads[root].first_run == own.first_execution_run_id
            for _ in range(50):
                if any(FORGED_NOTICE in m for m in chat.made):
                    break
                await asyncio.sleep(0.1)
            assert any(FORGED_NOTICE in m for m in chat.made), chat.made  # its own chain's record is narrated

            await own.terminate("the session ends")
            taken = await start(client, WORKFLOW_NAME, session, deployment)
            for _ in range(50):
                if any(m.startswith("This thread no longer follows a session") for m in chat.made):
                    break
                await asyncio.sleep(0.1)
            assert [m for m in chat.made if m.startswith("This thread no longer follows a session")], chat.made
            await _posted_in_thread(bot, root, "kill it anyway", at=300)
            assert chat.made[-1].startswith("Not delivered:") and "another run chain" in chat.made[-1], chat.made
            assert [e async for e in taken.fetch_history_events()
                    if e.HasField("workflow_execution_signaled_event_attributes")] == []
            await taken.terminate("test finished")
        finally:
            _stop(bot)
