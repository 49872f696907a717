"""The bot's parsing and rendering, without services: what a post asks for, which review a reply answers,
and code in a post that no chat client can crop or cut short."""

from __future__ import annotations

import re

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bamboo.approvals.keys import LocalKey
from bamboo.frontends.mattermost.review_tags import review_tag
from bamboo.frontends.mattermost.bot import Prompt, Thread
from bamboo.frontends.mattermost.chat import split_message
from bamboo.frontends.mattermost.commands import parse_root, parse_thread
from bamboo.frontends.mattermost.render import WRAP, numbered
from policy.decisions import DecisionKind


def test_channel_commands():
    assert parse_root("investigate 40112233 --verbose").model_dump(include={"kind", "task_id", "verbose"}) == {
        "kind": "investigate", "task_id": 40112233, "verbose": True}
    assert parse_root("investigate jobs die with exit 137").symptom == "jobs die with exit 137"
    assert parse_root("investigate 1 --sudo").kind == "invalid"
    assert parse_root("/approvals").kind == "pending" and parse_root("analyze 7").task_id == 7
    assert parse_root("good morning everyone") is None


def test_thread_replies():
    assert parse_thread("y k3v7qa").model_dump(include={"decision", "tag"}) == {
        "decision": DecisionKind.RUN_ONCE, "tag": "k3v7qa"}
    assert parse_thread("N").decision is DecisionKind.REJECT and parse_thread("k K3V7QA").tag == "k3v7qa"
    edit = parse_thread("e\n```python\nreturn 1\n```")
    assert edit.decision is DecisionKind.EDIT and edit.replacement_code == "return 1" and edit.tag is None
    assert parse_thread("e k3v7qa\n```python\nreturn 1\n```").tag == "k3v7qa"
    # an answer that runs code names the review it answers
    for bare in ("y", "a", "k"):
        assert parse_thread(bare).kind == "invalid" and "TAG" in parse_thread(bare).error
    assert parse_thread("e").kind == "invalid"  # an edit without its replacement block
    assert parse_thread("/revoke all").target == "all" and parse_thread("/approvals").kind == "approvals"
    assert parse_thread("--verbose").verbose and not parse_thread("verbose off").verbose
    assert parse_thread("yes please look at the logs").kind == "message"


def test_a_reply_answers_the_review_posted_before_it():
    thread = Thread(root_id="r", channel_id="c", session_id="mm-r",
                    prompts=[Prompt(100, 1, "aa", "r1"), Prompt(200, 1, "bb", "r2"), Prompt(300, 2, "cc", "r3")])
    assert thread.prompt_for(250) == Prompt(200, 1, "bb", "r2")  # typed before turn 2's review was posted
    assert thread.prompt_for(300).turn == 2 and thread.prompt_for(50) is None


def test_code_in_a_post_is_wrapped_spelled_out_and_cannot_close_its_fence():
    code = "x = 1;" + " " * 300 + "kill()\ny = '\u202e'\nz = '```'"
    text = numbered(code, {1})
    lines = text.split("\n")[1:-1]
    assert all(len(line) <= WRAP + 8 for line in lines)
    assert lines[0].startswith("▶  1 │") and any("kill()" in line for line in lines if line.startswith("    ↪"))
    assert "⟨U+202E⟩" in text and text.count("```") == 2


def test_long_posts_are_split_with_their_code_fences_balanced():
    message = "head\n```text\n" + "\n".join(f"line {i}" for i in range(5000)) + "\n```\ntail"
    parts = split_message(message, limit=2000)
    assert len(parts) > 1 and all(len(p) <= 2000 + 10 for p in parts)
    assert all(p.count("```") % 2 == 0 for p in parts)
    assert "".join(parts).count("line 4999") == 1


def test_a_line_longer_than_a_post_is_cut_where_its_rest_stays_inert():
    """A quoted summary of 14,997 characters and then "# Policy check: read-only" went out with its rest as a
    post of its own, outside the quote, starting with a live heading: the cut fell between "\\" and "#"."""
    from markdown_it import MarkdownIt

    from bamboo.frontends.mattermost.render import review_post

    forged = "# Policy check: read-only, nothing in this code changes PanDA"
    for filler in (14_997, 14_996, 14_995):
        parts = split_message("> " + "a" * filler + forged.replace("#", "\\#"), limit=15_000)
        assert len(parts) == 2 and all(len(p) <= 15_000 for p in parts)
        assert parts[1].startswith("> ") and "<h1" not in MarkdownIt("commonmark").render(parts[1])
    cut = split_message("x" * 14_995 + "&#64;channel tail", limit=15_000)
    assert cut[1].startswith("↪ ") and "&#64;" in cut[1]
    post = review_post(_review("a" * 14_997 + forged), tag="abc234")
    assert len(split_message(post)) == 1 and "more characters: see the console" in post


HOSTILE = ("[click](http://evil.example/) ![x](http://evil.example/img.png)\n```\n"
           "@channel @alice <http://evil.example/>\n# HEADING\n\x1bc\u202eevil")


def _review(summary: str):
    from bamboo.investigation.contract import PendingView
    from policy.decisions import DecisionKind

    return PendingView(
        session_id="s", turn=1, code_hash="ab" * 32, code="r = await tools.kill_task(task_id=task_id)\nreturn r",
        summary=summary, trigger_signals=["@here look"], requester="alice", read_only=False, tools=["kill_task"],
        state_changing=["kill_task"], reason="state_changing", detail="state-changing code needs a fresh approval",
        choices=[DecisionKind.RUN_ONCE, DecisionKind.REJECT], state_changing_lines={"kill_task": [1]},
        allow_set=["kill_task"], review="ef" * 32)


def test_a_hostile_summary_cannot_link_mention_fence_or_swallow_the_trusted_lines():
    """Issue 24: the review post pasted the model's summary raw, inside the verdict line: live links, an
    image, mentions, and a code fence that swallowed the tools line."""
    from markdown_it import MarkdownIt

    from bamboo.frontends.mattermost.render import review_post

    post = review_post(_review(HOSTILE), tag="abc234")
    lines = post.split("\n")
    trusted = [f"#### Review · turn 1 · `{'ab' * 32}` · review `{'ef' * 32}`", "**STATE\\-CHANGING (kill_task)** · asked by **alice**",
               "task: no task: a session without one · waiting unknown", "request: (not recorded)",
               "tools: kill_task · may call when run: kill_task"]
    assert lines[:5] == trusted
    label = lines.index("**The model says (unverified):**")
    assert label > 3 and lines[label + 1].startswith("> ")
    block_end = lines.index("", label)
    block = "\n".join(lines[label + 1:block_end])
    assert all(line.startswith("> ") for line in lines[label + 1:block_end])
    assert lines[block_end + 1] == "```text"  # the code's fence opens after the block, not inside it
    assert "@" not in block and "(at)channel" in block and "(at)alice" in block and "(at)here" in block
    assert "\x1b" not in post and "\u202e" not in post and r"⟨U\+001B⟩c⟨U\+202E⟩evil" in block
    for raw in (r"(?<!\\)\]\(", r"(?<!\\)!(?<!\\)\[", "<http", "```", "http://", r"\n> #"):
        assert not re.search(raw, block), raw
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(post)
    assert "<a " not in html and "<img" not in html and "<h1" not in html and html.count("<pre>") == 1
    quote = html[html.index("<blockquote>"):html.index("</blockquote>")]
    assert "evil" in quote and "HEADING" in quote and "tools:" not in quote and "STATE-CHANGING" not in quote
    assert html.index("tools: kill_task") < html.index("<blockquote>")


def test_the_trusted_lines_are_inert_whatever_names_and_reasons_reach_them():
    """The effect, tools, allow-set and policy lines are the post's trusted part, yet they repeat names read
    from the code (a getattr's literal once drew a live mention, an image and a bold "read-only" line there)
    and reasons that quote it; a replayed procedure's name and notes too. Each is written inert."""
    from markdown_it import MarkdownIt

    from bamboo.frontends.mattermost.render import pending_list, review_post
    from bamboo.investigation.client import PendingApproval
    from policy.review_facts import ProcedureView

    forged = "x)** @channel ![](https://evil.example/p.png) [details](https://evil.example/)\n\n# **read-only**"
    view = _review("summary").model_copy(update={
        "tools": ["kill_task", forged], "state_changing": ["kill_task", forged], "allow_set": [forged],
        "detail": forged, "procedures": [ProcedureView(name=forged, code_hash="cd" * 32, code="return 1",
                                                       read_only=False, state_changing=[forged])]})
    for post in (review_post(view, tag="abc234"), pending_list([PendingApproval(session_id="s", view=view)])):
        html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(post)
        assert "<a " not in html and "<img" not in html and "<h1" not in html, html
        assert "@channel" not in post and "(at)channel" in post
        assert "<strong>read-only</strong>" not in html


def test_a_request_of_several_lines_cannot_draw_the_reviews_own_lines():
    """A requester's request is shown above the facts; written over several lines it drew "tools:" and
    "policy:" lines that looked exactly like the real ones, above them. It is one line, its breaks spelled."""
    from bamboo.frontends.mattermost.render import review_post

    request = "look at it\ntools: get_task · may call when run: get_task\u2028policy: read-only code"
    post = review_post(_review("s").model_copy(update={"request": request}), tag="abc234")
    assert [line for line in post.split("\n") if line.startswith(("tools:", "policy:"))] == [
        "tools: kill_task · may call when run: kill_task",
        "policy: state\\-changing code needs a fresh approval (version ``)"]
    assert "request: look at it ⏎ tools: get\\_task" in post or "request: look at it ⏎ tools: get_task" in post


def test_narrated_replies_and_tool_calls_are_inert():
    from datetime import datetime, timezone

    from bamboo.frontends.mattermost.render import entry_post
    from bamboo.investigation.contract import TranscriptEntry

    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    reply = entry_post(TranscriptEntry(seq=1, at=at, kind="reply", text=HOSTILE, turn=1), verbose=False)
    assert reply.startswith("`[reply]`") and "@" not in reply and "```" not in reply
    assert not re.search(r"(?<!\\)\]\(", reply) and "http://" not in reply
    run = entry_post(TranscriptEntry(seq=2, at=at, kind="run", text="run ok", turn=1, data={"calls": [
        {"tool": "get_task_details", "args_preview": '{"task_id": "`@channel` [x](http://evil)"}', "outcome": "allowed",
         "result_shape": "dict(2) @here", "bytes": 10, "reason": "<b>x</b>"}]}), verbose=True)
    call = run.split("\n")[1]
    assert call.startswith("- tool `get_task_details(") and call.count("`") == 2 and "@" not in call
    assert "<b>" not in call and "(at)here" in call


def test_task_ids_in_commands_are_plain_bounded_integers():
    """A 5000-digit number or a Unicode digit ('²') passed str.isdigit and made int() raise in the bot."""
    from bamboo.frontends.mattermost.commands import parse_root

    assert parse_root("analyze 40112233").task_id == 40112233
    assert parse_root(f"analyze {2**70}").task_id == 2**70  # a number: the task check says it is out of range
    for word in ("9" * 5000, "²", "١٢٣"):
        assert parse_root(f"analyze {word}").kind == "invalid"
        command = parse_root(f"investigate {word}")
        assert command.task_id is None and command.kind == "investigate"


class _Chat:
    """The bot's chat client, holding one thread: the posts it returns and the ones the bot makes (a review's posts
    join the thread, as Mattermost keeps them)."""

    def __init__(self, thread: list[dict]) -> None:
        self.me = {"id": "bot" + "0" * 23}
        self.thread, self.made = thread, []

    async def thread_posts(self, root_id: str) -> list[dict]:
        return sorted(self.thread, key=lambda p: p["create_at"])

    async def post(self, channel_id: str, message: str, root_id: str = "") -> dict:
        self.made.append(message)
        return {"create_at": 10**13}

    async def post_parts(self, channel_id: str, parts: list[str], root_id: str = "") -> list[dict]:
        made = []
        for part in parts:
            self.made.append(part)
            self.posted = getattr(self, "posted", 0) + 1
            made.append({"id": f"p{self.posted:025d}", "user_id": self.me["id"], "create_at": 10**13 + self.posted,
                         "edit_at": 0, "delete_at": 0, "message": part})
            self.thread.append(made[-1])
        return made


FIRST_RUN = "0190e7a2-5b1c-7d3e-9f00-1234567890ab"  # the session's chain, as the bot's opening post names it


class _Sessions:
    """A session whose current review (turn 5, code C) was asked for while the bot was down and never posted. Every
    read and request names the chain the thread opened (``first_run``)."""

    def __init__(self) -> None:
        self.decided: list[tuple] = []

    async def execution_status(self, session_id: str, *, first_run: str | None = None) -> str:
        assert first_run in (None, FIRST_RUN)
        return "running"

    async def first_run(self, session_id: str) -> str:
        return FIRST_RUN

    async def transcript(self, session_id: str, since: int = 0, *, first_run: str | None = None) -> list:
        assert first_run == FIRST_RUN, "the thread reads only the chain it opened"
        return []

    async def pending_memo(self, session_id: str, *, first_run: str | None = None):
        return type("Memo", (), {"turn": 5, "code_hash": "c" * 64})()

    async def pending(self, session_id: str, *, first_run: str | None = None):
        assert first_run == FIRST_RUN
        return None

    async def decide(self, session_id, speaker, turn, code_hash, kind, replacement_code=None, *, review,
                     first_run=None):
        assert review == SHOWN_REVIEW, "the answer names the review the thread showed"
        assert first_run == FIRST_RUN, "the answer goes only to the chain the thread opened"
        self.decided.append((speaker.identity, turn, code_hash, kind))
        return None


BOT_KEY = LocalKey("mm-bot", Ed25519PrivateKey.generate())


SHOWN_REVIEW = "5e" * 32


def _tag(turn: int, code_hash: str, session: str = "mm-" + "r" * 26, review: str = SHOWN_REVIEW) -> str:
    return review_tag(BOT_KEY, session, turn, code_hash, review)


async def _reply_after_restart(thread: list[dict], message: str) -> tuple[list[tuple], list[str]]:
    from bamboo.frontends.mattermost.bot import MattermostBot
    from bamboo.frontends.mattermost.users import UserMap
    from bamboo.settings import Settings

    chat, sessions = _Chat(thread), _Sessions()
    bot = MattermostBot(chat, client=None, settings=Settings.model_construct(deployment="default"),  # type: ignore[arg-type]
                        users=UserMap(users={"x" * 26: "xavier"}), key=BOT_KEY, audit=None)  # type: ignore[arg-type]
    bot.sessions = sessions  # type: ignore[assignment]
    try:
        await bot.handle({"id": "y" * 26, "root_id": "r" * 26, "channel_id": "c" * 26, "user_id": "x" * 26,
                          "message": message, "create_at": 200})
    finally:
        for t in bot.threads.values():
            if t.task:
                t.task.cancel()
    return sessions.decided, chat.made


BOT_ID = "bot" + "0" * 23
ASKED = {"user_id": "alice", "create_at": 1, "message": "investigate 1"}
BOT_OPENED = {"user_id": BOT_ID, "create_at": 2,
              "message": f"Session `mm-{'r' * 26}` opened (run `{FIRST_RUN}`) on task 1 by alice."}
OPENED = [ASKED, BOT_OPENED]


def _posted_review(turn: int, code_hash: str, at: int, by: str = BOT_ID, review: str = SHOWN_REVIEW) -> dict:
    return {"id": f"review{turn}{code_hash[:4]}{at:016d}", "user_id": by, "create_at": at, "edit_at": 0,
            "message": f"#### Review · turn {turn} · `{code_hash}` · review `{review}`\n**READ-ONLY**"}


async def test_after_a_restart_a_reply_answers_the_review_the_thread_showed_not_the_current_one():
    """A bot restarted while a new review was asked for elsewhere approved that unseen review on the first `y`."""
    shown, forged = _posted_review(4, "a" * 64, 100), _posted_review(5, "c" * 64, 150, by="m" * 26)
    decided, _ = await _reply_after_restart([*OPENED, shown, forged], f"y {_tag(4, 'a' * 64)}")
    assert decided == [("xavier", 4, "a" * 64, DecisionKind.RUN_ONCE)], "the review shown, not turn 5's"

    decided, made = await _reply_after_restart([*OPENED, forged], f"y {_tag(5, 'c' * 64)}")
    assert decided == [] and made == [f"No review in this thread shows the tag `{_tag(5, 'c' * 64)}`; answer with "
                                      "the tag of the review you read."]


async def test_a_review_posted_while_the_approver_read_another_is_not_the_one_approved():
    """The requester swapped the pending code a second before the approver's reply: the bot posted the new review,
    and a bare `y` answered it. The reply names the tag of the review read; the session refuses it as stale."""
    read, swapped = _posted_review(1, "a" * 64, 100), _posted_review(1, "b" * 64, 190)
    decided, _ = await _reply_after_restart([*OPENED, read, swapped], f"y {_tag(1, 'a' * 64)}")
    assert decided == [("xavier", 1, "a" * 64, DecisionKind.RUN_ONCE)]

    decided, made = await _reply_after_restart([*OPENED, read, swapped], "y")
    assert decided == [] and "name the review you answer" in made[0]
    # a tag is the bot's, per session: another session's tag, or one made up, answers nothing here
    for tag in (_tag(1, "a" * 64, session="mm-" + "o" * 26), "aaaaaa"):
        decided, made = await _reply_after_restart([*OPENED, read, swapped], f"y {tag}")
        assert decided == [] and "No review in this thread shows the tag" in made[0]
    # the same code reviewed again (another verdict: a procedure row rewritten between an edit and its undo) is
    # another review with its own tag: the first one's tag does not answer it
    again = _posted_review(1, "a" * 64, 150, review="7a" * 32)
    decided, made = await _reply_after_restart([*OPENED, again], f"y {_tag(1, 'a' * 64)}")
    assert decided == [] and "No review in this thread shows the tag" in made[0]
    # a rejection runs nothing: it may leave the tag out and answers the review posted before it
    decided, _ = await _reply_after_restart([*OPENED, read, swapped], "n")
    assert decided == [("xavier", 1, "b" * 64, DecisionKind.REJECT)]


async def test_the_chat_client_reads_a_threads_posts_oldest_first_with_their_authors():
    """What a restarted bot reads back (`MattermostChat.thread_posts`, `GET /posts/{id}/thread`), through the
    production client against the stand-in; only the bot's own review post is taken as shown."""
    from bamboo.frontends.mattermost.chat import MattermostChat
    from bamboo.frontends.mattermost.render import reviewed_in
    from tests.mattermost.standin import MattermostStandIn

    with MattermostStandIn() as standin:
        alice, bot = standin.add_user("alice"), standin.add_user("bamboo")
        channel = standin.add_channel("ops", alice, bot)
        people = {u.id: MattermostChat({"url": "127.0.0.1", "port": standin.port, "scheme": "http", "token": u.token,
                                        "basepath": "/api/v4"}) for u in (alice, bot)}
        for chat in people.values():
            await chat.login()
        as_alice, as_bot = people[alice.id], people[bot.id]
        root = await as_alice.post(channel.id, "investigate 40118507")
        await as_bot.post(channel.id, f"#### Review · turn 4 · `{'a' * 64}` · review `{'b' * 64}`\n**READ-ONLY**",
                          root["id"])
        await as_alice.post(channel.id, f"#### Review · turn 5 · `{'c' * 64}` · review `{'b' * 64}`", root["id"])
        posts = await as_bot.thread_posts(root["id"])
    assert [p["message"].split("\n")[0][:22] for p in posts] == [
        "investigate 40118507", "#### Review · turn 4 ·", "#### Review · turn 5 ·"]
    assert [p["create_at"] for p in posts] == sorted(p["create_at"] for p in posts)
    shown = [reviewed_in(p["message"]) for p in posts if p["user_id"] == as_bot.me["id"]]
    assert shown == [(4, "a" * 64, "b" * 64)]


def test_a_review_post_names_the_grants_auto_run_leaves_inert():
    from bamboo.frontends.mattermost.render import review_post

    view = _review("reads the task").model_copy(update={"grants": ["proc__look_@channel_**x**@" + "cd" * 32]})
    post = review_post(view, tag="abc234")
    line = next(line for line in post.splitlines() if line.startswith("auto\\-run also grants"))
    assert "cdcdcdcdcdcd" in line and "@channel" not in line.replace("\\@", "") and "**x**" not in line
    assert "auto" not in review_post(_review("reads the task"), tag="abc234").split("Reply in this thread")[0]


async def test_a_thread_the_bot_did_not_open_is_not_followed():
    """Anyone may start a session named after any post (`bamboo investigate --session mm-<post id>`): the bot took
    every such thread for its own and signed each mapped member's reply there as a request in their name."""
    review = _posted_review(1, "a" * 64, 100)  # the bot's review post alone does not make the thread its own
    decided, made = await _reply_after_restart([ASKED, review], f"y {_tag(1, 'a' * 64)}")
    assert decided == [] and made == []
    posed = {"user_id": "m" * 26, "create_at": 2, "message": BOT_OPENED["message"]}  # the line, typed by a person
    decided, made = await _reply_after_restart([ASKED, posed, review], f"y {_tag(1, 'a' * 64)}")
    assert decided == [] and made == []


async def test_an_unmapped_member_can_neither_list_reviews_nor_turn_on_narration():
    """Channel membership grants nothing: `approvals` listed every pending review and `verbose on` narrated a
    session's code and tool results for anyone who could post in the channel."""
    from bamboo.frontends.mattermost.bot import MattermostBot
    from bamboo.frontends.mattermost.users import UserMap
    from bamboo.settings import Settings

    class _Audit:
        def __init__(self) -> None:
            self.events: list = []

        async def append(self, event) -> None:
            self.events.append(event)

    chat, sessions, audit = _Chat([*OPENED]), _Sessions(), _Audit()
    bot = MattermostBot(chat, client=None, settings=Settings.model_construct(deployment="default"),  # type: ignore[arg-type]
                        users=UserMap(users={"x" * 26: "xavier"}), key=BOT_KEY, audit=audit)  # type: ignore[arg-type]
    bot.sessions = sessions  # type: ignore[assignment]
    try:
        for message in ("verbose on", "approvals"):
            await bot.handle({"id": "y" * 26, "root_id": "r" * 26, "channel_id": "c" * 26, "user_id": "u" * 26,
                              "message": message, "create_at": 200})
        await bot.handle({"id": "z" * 26, "root_id": "", "channel_id": "c" * 26, "user_id": "u" * 26,
                          "message": "pending", "create_at": 300})
    finally:
        for t in bot.threads.values():
            if t.task:
                t.task.cancel()
    assert not bot.threads["r" * 26].verbose
    assert all(m.startswith("Refused: your Mattermost account is not mapped") for m in chat.made), chat.made
    assert [e.body["reason"] for e in audit.events] == ["unmapped_user"] * 3


async def test_a_session_started_elsewhere_under_the_posts_name_is_not_opened_here():
    """Post ids are public: someone who started `mm-<post id>` before the bot handled the post made the bot attach
    to their session, post its opened line and sign every mapped member's reply there."""
    from bamboo.frontends.mattermost.bot import MattermostBot
    from bamboo.frontends.mattermost.users import UserMap
    from bamboo.investigation import client as inv
    from bamboo.settings import Settings

    class _Taken(_Sessions):
        async def start(self, inp, *, attach: bool = True) -> str:
            assert attach is False, "the bot must not attach to a session it did not start"
            raise inv.InvestigationError(f"a session named {inp.session_id} already exists; it was not started here")

    chat = _Chat([])
    bot = MattermostBot(chat, client=None, settings=Settings.model_construct(deployment="default"),  # type: ignore[arg-type]
                        users=UserMap(users={"x" * 26: "xavier"}), key=BOT_KEY, audit=None)  # type: ignore[arg-type]
    bot.sessions = _Taken()  # type: ignore[assignment]
    await bot.handle({"id": "p" * 26, "root_id": "", "channel_id": "c" * 26, "user_id": "x" * 26,
                      "message": "investigate 40112233", "create_at": 100})
    assert bot.threads == {}
    assert len(chat.made) == 1 and chat.made[0].startswith("Not opened:") and "opened on" not in chat.made[0]


async def test_an_identity_is_posted_inert():
    """The opened line and the "kept for the session" line posted the identity raw; an identity the registry
    accepts may hold Markdown and a mention ("ops-@here" notified the whole channel)."""
    from bamboo.frontends.mattermost.bot import MattermostBot
    from bamboo.frontends.mattermost.users import UserMap
    from bamboo.investigation import client as inv
    from bamboo.settings import Settings

    class _Opens(_Sessions):
        async def start(self, inp, *, attach: bool = True) -> str:
            return inp.session_id

        async def message(self, session_id, speaker, text, **_) -> inv.Delivery:
            return inv.Delivery(name=inv.Message.MESSAGE, durable=True)

    chat = _Chat([*OPENED])
    bot = MattermostBot(chat, client=None, settings=Settings.model_construct(deployment="default"),
                        users=UserMap(users={"x" * 26: "ops-@here"}), key=BOT_KEY, audit=None)
    bot.sessions = _Opens()
    try:
        await bot.handle({"id": "p" * 26, "root_id": "", "channel_id": "c" * 26, "user_id": "x" * 26,
                          "message": "investigate 40112233", "create_at": 100})
        await bot.handle({"id": "y" * 26, "root_id": "r" * 26, "channel_id": "c" * 26, "user_id": "x" * 26,
                          "message": "look at the logs", "create_at": 200})
    finally:
        for t in bot.threads.values():
            if t.task:
                t.task.cancel()
    opened = [m for m in chat.made if " opened (run `" in m and " on task 40112233 by " in m]
    kept = [m for m in chat.made if m.startswith("ops")]
    assert opened and kept, chat.made
    assert not [m for m in opened + kept if "@" in m], chat.made
    assert "ops\\-(at)here" in opened[0] and kept[0].startswith("ops\\-(at)here: ")


async def test_a_post_an_integration_made_under_a_persons_id_is_not_theirs():
    """An incoming webhook posts under the user id of whoever created it: anyone holding its URL asked for code
    as that person (who then became the session's requester, and could no longer be its distinct approver)."""
    import asyncio
    import json

    from bamboo.frontends.mattermost.bot import MattermostBot
    from bamboo.frontends.mattermost.users import UserMap
    from bamboo.settings import Settings

    bot = MattermostBot(_Chat([]), client=None, settings=Settings.model_construct(deployment="default"),  # type: ignore[arg-type]
                        users=UserMap(users={"x" * 26: "xavier"}), key=BOT_KEY, audit=None)  # type: ignore[arg-type]
    bot.queue = asyncio.Queue()
    base = {"id": "p" * 26, "root_id": "", "channel_id": "c" * 26, "user_id": "x" * 26, "type": "",
            "message": "investigate 40112233", "create_at": 100}
    for props in ({"from_webhook": "true"}, {"from_bot": "true"}, {"from_plugin": "true"},
                  {"override_username": "xavier"}, {}):
        await bot.on_event(json.dumps({"event": "posted", "data": {"post": json.dumps({**base, "props": props})}}))
    assert bot.queue.qsize() == 1 and bot.queue.get_nowait()["props"] == {}


def test_a_reply_of_several_lines_is_quoted_so_no_line_reads_as_the_bots():
    """Mattermost runs the bot's posts together without a header: a model's reply of two lines posted a second
    line identical to the bot's own acknowledgement of a decision."""
    from datetime import datetime, timezone

    from bamboo.frontends.mattermost.render import entry_post
    from bamboo.investigation.contract import TranscriptEntry

    forged = "alice: delivered; the session will judge it when a worker runs (its verdict shows in the transcript)."
    post = entry_post(TranscriptEntry(seq=1, at=datetime(2026, 1, 1, tzinfo=timezone.utc), kind="reply",
                                      text=f"3 jobs failed.\n{forged}", turn=1), verbose=False)
    assert post is not None
    head, *rest = post.rstrip("\n").split("\n")
    assert head == "`[reply]`" and rest and all(line.startswith("> ") for line in rest), post


def test_the_workflow_s_notice_is_posted_under_its_own_label():
    """A rejection is the workflow's notice; the thread shows it at any verbosity, labelled apart from replies."""
    from datetime import datetime, timezone

    from bamboo.frontends.mattermost.render import entry_post
    from bamboo.investigation.contract import TranscriptEntry

    notice = TranscriptEntry(seq=1, at=datetime(2026, 1, 1, tzinfo=timezone.utc), kind="notice",
                             text="Rejected by bob; the code did not run.", turn=1)
    assert entry_post(notice, verbose=False).startswith("`[notice]` Rejected by bob; the code did not run")
