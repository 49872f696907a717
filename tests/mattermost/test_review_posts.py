"""An answer is taken only for a review whose posts still say what the bot posted; an integration's post in a session
thread is flagged as not the bot's.

Whoever Mattermost lets edit others' posts (system admins; team admins by default; anyone holding the bot's token)
rewrote the code block of a posted review of a kill to harmless code, leaving its header and tag: the approver read
the edited post, answered `y TAG`, and the bot signed the kill. The bot now keeps each review's post ids and a hash
of what they said, re-reads them when an answer that runs code names the review, and refuses it (and posts the review
again while it waits) when one was edited, deleted or says anything else; a restarted bot does the same with what it
reads back of its own posts. An incoming webhook may post under the bot's name and icon with a review's real tag
beside other code; such a post in a session thread gets a warning under it.
"""

from __future__ import annotations

import asyncio
import json
import re

from mattermostdriver import Driver

from bamboo.frontends.mattermost.bot import MattermostBot
from bamboo.frontends.mattermost.chat import MattermostChat
from bamboo.frontends.mattermost.users import UserMap
from bamboo.settings import Settings
from policy.decisions import DecisionKind
from tests.mattermost.standin import MattermostStandIn, wait_for_post
from tests.mattermost.test_units import (
    BOT_KEY, OPENED, SHOWN_REVIEW, _Chat, _posted_review, _reply_after_restart, _review, _Sessions,
    _tag,
)

KILL_HASH = "a" * 64
CHANGED = "**The post was changed**"


def _refused(made: list[str], tag: str) -> bool:
    return made == [f"Not sent: the review post for `{tag}` was changed (edited or deleted) after this bot posted it, "
                    "so it may not show what you would approve; ask for the review again (it is posted again while it "
                    "waits) and answer the new post."]


def _split_review(tag: str, at: int, parts: int = 3) -> list[dict]:
    """A review the bot posted in ``parts`` posts, each ending with its part line (``review_parts``)."""
    first = _posted_review(4, KILL_HASH, at)
    bodies = [first["message"]] + [f"```text\n {n} │ more code\n```" for n in range(2, parts + 1)]
    return [{**first, "id": f"split{n}{'x' * 20}", "create_at": at + n,
             "message": f"{body}\n\n_review `{tag}`, post {n} of {parts}_"}
            for n, body in enumerate(bodies, start=1)]


async def test_after_a_restart_an_answer_to_an_edited_or_incomplete_review_is_refused():
    tag = _tag(4, KILL_HASH)
    shown = _posted_review(4, KILL_HASH, 100)
    decided, made = await _reply_after_restart([*OPENED, shown], f"y {tag}")
    assert decided == [("xavier", 4, KILL_HASH, DecisionKind.RUN_ONCE)] and made == []  # as posted: answered

    # the reviewer's PoC: the code block swapped for harmless code; header and tag left alone; Mattermost marks it
    edited = {**shown, "edit_at": 180, "update_at": 180,
              "message": shown["message"] + "\n```text\n   1 │ return await tools.get_task_details(task_id=1)\n```"}
    for answer in (f"y {tag}", f"a {tag}", f"k {tag}"):
        decided, made = await _reply_after_restart([*OPENED, edited], answer)
        assert decided == [] and _refused(made, tag), (answer, made)
    # rejecting runs nothing: still taken
    decided, _ = await _reply_after_restart([*OPENED, edited], f"n {tag}")
    assert decided == [("xavier", 4, KILL_HASH, DecisionKind.REJECT)]

    # a review split over three posts: all there and unedited it is answered; one edited or missing, refused
    split = _split_review(tag, 100)
    decided, _ = await _reply_after_restart([*OPENED, *split], f"y {tag}")
    assert decided == [("xavier", 4, KILL_HASH, DecisionKind.RUN_ONCE)]
    for broken in ([split[0], {**split[1], "edit_at": 150}, split[2]], [split[0], split[2]], split[:2]):
        decided, made = await _reply_after_restart([*OPENED, *broken], f"y {tag}")
        assert decided == [] and _refused(made, tag), made


class _Reviewing(_Sessions):
    """A session that opens, and whose review of a kill waits for an answer."""

    def __init__(self) -> None:
        super().__init__()
        self.view = _review("kills the task").model_copy(update={"review": SHOWN_REVIEW})

    async def start(self, inp, *, attach: bool = True) -> str:
        return inp.session_id

    async def pending(self, session_id: str, *, first_run: str | None = None):
        return self.view


async def test_while_it_runs_the_bot_refuses_an_answer_to_a_review_whose_posts_changed_and_posts_it_again():
    """The bot's own record of what it posted: the text changed without Mattermost's edit mark (a database edit,
    an import) is caught by the hash; a deleted post by its absence."""
    chat, sessions = _Chat([]), _Reviewing()
    bot = MattermostBot(chat, client=None, settings=Settings.model_construct(deployment="default"),  # type: ignore[arg-type]
                        users=UserMap(users={"x" * 26: "xavier"}), key=BOT_KEY, audit=None, poll_s=0.05)  # type: ignore[arg-type]
    bot.sessions = sessions  # type: ignore[assignment]
    root = "r" * 26
    tag = _tag(1, sessions.view.code_hash)

    async def reviews() -> list[dict]:
        for _ in range(100):
            found = [p for p in chat.thread if p["message"].startswith("#### Review")]
            if len(found) > posted:
                return found
            await asyncio.sleep(0.02)
        raise AssertionError(chat.made)

    async def answer() -> list[str]:
        before = len(chat.made)
        await bot.handle({"id": "y" * 26, "root_id": root, "channel_id": "c" * 26, "user_id": "x" * 26,
                          "message": f"y {tag}", "create_at": 10**14})
        return chat.made[before:]

    try:
        await bot.handle({"id": root, "root_id": "", "channel_id": "c" * 26, "user_id": "x" * 26,
                          "message": "investigate 40112233", "create_at": 1})
        posted = 0
        first = (await reviews())[-1]
        assert bot.threads[root].prompts[-1].posts == (first["id"],)

        first["message"] = first["message"].replace("kill_task", "get_task_details")  # no edit mark
        assert _refused(await answer(), tag) and sessions.decided == []
        posted = 1
        second = (await reviews())[-1]  # posted again while it waits
        chat.thread.remove(second)  # deleted
        assert _refused(await answer(), tag) and sessions.decided == []
        posted = 1  # the deleted one is gone from the thread
        third = (await reviews())[-1]
        assert third["id"] != second["id"] and third["message"] == second["message"]
        assert await answer() == [] and sessions.decided == [("xavier", 1, sessions.view.code_hash,
                                                                DecisionKind.RUN_ONCE)]
    finally:
        for t in bot.threads.values():
            if t.task:
                t.task.cancel()


async def test_a_review_post_an_admin_edits_or_deletes_on_the_server_is_not_answered():
    """Through the bot's production chat client against the stand-in, whose PUT /posts/{id}/patch and DELETE
    /posts/{id} behave as Mattermost's (an edit sets edit_at; a deleted post is no longer returned)."""
    with MattermostStandIn() as standin:
        alice, bob, admin = standin.add_user("alice"), standin.add_user("bob"), standin.add_user("root", admin=True)
        bot_user = standin.add_user("bamboo")
        channel = standin.add_channel("ops", alice, bob, admin, bot_user)

        def driver(user) -> Driver:
            made = Driver({"url": "127.0.0.1", "port": standin.port, "scheme": "http", "token": user.token})
            made.login()
            return made

        async def post(user, message: str, root_id: str = "") -> dict:
            return await asyncio.to_thread(driver(user).posts.create_post,
                                           {"channel_id": channel.id, "message": message, "root_id": root_id})

        chat = MattermostChat({"url": "127.0.0.1", "port": standin.port, "scheme": "http", "token": bot_user.token,
                               "basepath": "/api/v4"})
        await chat.login()
        sessions = _Reviewing()
        users = UserMap(users={alice.id: "alice", bob.id: "bob"})

        def new_bot() -> MattermostBot:
            made = MattermostBot(chat, client=None, settings=Settings.model_construct(deployment="default"),  # type: ignore[arg-type]
                                 users=users, key=BOT_KEY, audit=None, poll_s=0.1)  # type: ignore[arg-type]
            made.sessions = sessions  # type: ignore[assignment]
            return made

        bots = [new_bot()]
        try:
            root = await post(alice, "investigate 40112233")
            await bots[0].handle(root)
            session = "mm-" + root["id"]
            tag = _tag(1, sessions.view.code_hash, session=session)
            review = await wait_for_post(standin, root["id"], "#### Review", by=bot_user.id, timeout=20)
            assert f"`y {tag}`" in review["message"]

            async def answer(bot: MattermostBot) -> int:
                count = len(standin.thread(root["id"]))
                await bot.handle(await post(bob, f"y {tag}", root["id"]))
                return count

            # 1. an admin swaps the code block; bob answers the edited post: refused, and the review posted again
            await asyncio.to_thread(driver(admin).posts.patch_post, review["id"], {
                "message": review["message"].replace("kill_task", "get_task_details")})
            assert standin.posts[review["id"]]["edit_at"] > 0
            count = await answer(bots[0])
            await wait_for_post(standin, root["id"], "was changed (edited or deleted)", by=bot_user.id, after=count,
                                timeout=20)
            again = await wait_for_post(standin, root["id"], "#### Review", by=bot_user.id, after=count, timeout=20)
            assert sessions.decided == []
            # 2. bob answers the review as posted again: sent
            await answer(bots[0])
            assert sessions.decided == [("bob", 1, sessions.view.code_hash, DecisionKind.RUN_ONCE)]
            # 3. an admin deletes it: refused, posted again
            await asyncio.to_thread(driver(admin).posts.delete_post, again["id"])
            count = await answer(bots[0])
            await wait_for_post(standin, root["id"], "was changed (edited or deleted)", by=bot_user.id, after=count,
                                timeout=20)
            third = await wait_for_post(standin, root["id"], "#### Review", by=bot_user.id, after=count, timeout=20)
            assert len(sessions.decided) == 1
            # 4. an admin edits that one; the bot restarts: what it reads back of its own posts says it was edited
            await asyncio.to_thread(driver(admin).posts.patch_post, third["id"], {"message": CHANGED + third["message"]})
            for t in bots[0].threads.values():
                if t.task:
                    t.task.cancel()
            bots.append(new_bot())
            count = await answer(bots[1])
            await wait_for_post(standin, root["id"], "was changed (edited or deleted)", by=bot_user.id, after=count,
                                timeout=20)
            assert len(sessions.decided) == 1
        finally:
            for bot in bots:
                for t in bot.threads.values():
                    if t.task:
                        t.task.cancel()


async def test_an_integrations_post_in_a_session_thread_is_flagged_and_never_read():
    chat, sessions = _Chat([*OPENED]), _Sessions()
    bot = MattermostBot(chat, client=None, settings=Settings.model_construct(deployment="default"),  # type: ignore[arg-type]
                        users=UserMap(users={"x" * 26: "xavier"}), key=BOT_KEY, audit=None)  # type: ignore[arg-type]
    bot.sessions = sessions  # type: ignore[assignment]
    chat.me["username"] = "bamboo"
    tag = _tag(4, KILL_HASH)
    look_alike = {"id": "w" * 26, "root_id": "r" * 26, "channel_id": "c" * 26, "user_id": "x" * 26, "type": "",
                  "create_at": 150, "props": {"from_webhook": "true", "override_username": "bamboo"},
                  "message": f"#### Review · turn 4 · `{KILL_HASH}` · review `{SHOWN_REVIEW}`\nread-only\n`y {tag}`"}
    try:
        for props in ({"from_webhook": "true", "override_username": "bamboo"}, {"from_bot": "true"}):
            await bot.on_event(json.dumps({"event": "posted", "data": {"post": json.dumps({**look_alike, "props": props})}}))
            await bot.handle(bot.queue.get_nowait())
        assert len(chat.made) == 2 and all(m.startswith("⚠ The post above was made by an integration") and
                                            "not by this bot (user bamboo)" in m for m in chat.made), chat.made
        assert sessions.decided == [] and bot.threads["r" * 26].prompts == []  # nothing of it read
        # outside a session thread, or in a thread the bot did not open: nothing is said
        await bot.on_event(json.dumps({"event": "posted", "data": {"post": json.dumps({**look_alike, "root_id": ""})}}))
        assert bot.queue.empty()
        elsewhere = _Chat([{"user_id": "m" * 26, "create_at": 1, "message": "hello"}])
        other = MattermostBot(elsewhere, client=None, settings=Settings.model_construct(deployment="default"),  # type: ignore[arg-type]
                              users=UserMap(users={}), key=BOT_KEY, audit=None)  # type: ignore[arg-type]
        other.sessions = sessions  # type: ignore[assignment]
        await other.on_event(json.dumps({"event": "posted", "data": {"post": json.dumps(look_alike)}}))
        await other.handle(other.queue.get_nowait())
        assert elsewhere.made == [] and other.threads == {}
    finally:
        for t in bot.threads.values():
            if t.task:
                t.task.cancel()


def test_the_part_line_names_the_review_and_its_place():
    from bamboo.frontends.mattermost.render import review_part, review_parts

    text = "#### Review\n```text\n" + "\n".join(f"  {i} │ x = {i}" for i in range(3000)) + "\n```\nReply: `y abc234`"
    parts = review_parts(text, "abc234")
    assert len(parts) > 1 and [review_part(p) for p in parts] == [("abc234", n, len(parts))
                                                                   for n in range(1, len(parts) + 1)]
    assert all(p.count("```") % 2 == 0 for p in parts) and all(len(p) <= 16_383 for p in parts)
    assert review_parts("#### Review\nshort", "abc234") == ["#### Review\nshort"]
    assert review_part("#### Review\nshort") is None and re.search("_review", parts[0].split("\n")[-1])
