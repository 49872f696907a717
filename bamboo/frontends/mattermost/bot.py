"""The Mattermost bot: the commands of docs/mattermost.md in channels and threads, on the signed approver identity.

Every request the bot sends a session is signed with the bot's own key (registered with the ``front_end``
role) for the identity the deployment's user mapping gives the poster's Mattermost user id; the session
checks that signature, the person's registration and role, and the distinct-approver rule, exactly as for
the CLI. A poster who is not in the mapping is refused by the bot (channel membership grants nothing) and
the refusal is written to the audit log. A review reply that runs code names the tag of the review it answers (``review_tags``: keyed by
the bot's key, so no other code's review can show it) and is sent with that review's turn and full code hash; an
answer to a review the session has moved past is refused as stale by the session. A reply that runs nothing
(an edit, a rejection) may leave the tag out and answers the review posted before it.

A thread is one session (``mm-<root post id>``), so a restarted bot finds its sessions again from the thread
it is asked in, and the reviews it posted there from the thread's posts: a reply still answers the review shown
before it, never one the thread did not show. The thread is bound to the session's run chain: the bot's opening
post names the chain's first run, and every read and request of the thread names it too (``first_run``), so a
workflow that takes the session's id after it ended (a requester's own, or another investigation) is neither
narrated nor answered here. ``--verbose`` narrates intent, code, policy and each tool call in that thread only;
it changes what is shown, never what may run.

An answer that runs code is sent only while every post of the review it names still says what the bot posted
(not edited, not deleted, the same text: ``posted_digest``); whoever Mattermost lets edit others' posts could
otherwise show harmless code under the header and tag of a kill. Posts an integration makes in a followed thread
(a webhook can take the bot's name and icon) get a warning under them: they are not the bot's.

Whatever the bot posts that it did not write itself (a symptom, an analysis's causes and suggestions, an
error's message) goes through ``inert_markdown``, as the session's narration does in ``render``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError

from bamboo.analysis.client import AnalysisClient, AnalysisError, analysis_id
from bamboo.analysis.contract import AnalysisResult
from bamboo.analysis.provenance import provenance
from bamboo.approvals.keys import LocalKey
from bamboo.audit import AuditEvent, AuditSink
from bamboo.frontends.inert_text import inert_markdown
from bamboo.frontends.mattermost.chat import MattermostChat
from bamboo.frontends.mattermost.commands import Command, parse_root, parse_thread
from bamboo.frontends.mattermost.render import (
    approvals_post, entry_post, pending_list, posted_digest, review_part, review_parts, review_post, reviewed_in,
)
from bamboo.frontends.mattermost.review_tags import review_tag
from bamboo.frontends.mattermost.users import UserMap
from bamboo.frontends.review import edit_diff
from bamboo.investigation import client as inv
from bamboo.models.incident import task_problem
from bamboo.settings import Settings

log = logging.getLogger("bamboo.mattermost")
SESSION_PREFIX = "mm-"
STATUS_EVERY = 5
HELP = ("In a channel: `investigate <task-id|symptom> [--verbose]`, `analyze <task-id>`, `approvals`. In a session's "
        "thread: a question or request (`!new TEXT` for newly written code, `!codify` to list written procedures "
        "that fit, `!codify N` to turn one into code), review replies `y TAG` `a TAG` `k TAG` (the tag the review "
        "shows) `e` `N`, `/approvals`, "
        "`/revoke <hash|proc|all>`, "
        "`--verbose` / `verbose off`. Only people the deployment mapped to a registered identity can act.")

# What Mattermost sets on a post an integration made: an incoming webhook, a bot, a plugin, a slash command's
# response. Such a post carries the user id of whoever created the integration, not of whoever wrote it.
_INTEGRATION_PROPS = ("from_webhook", "from_bot", "from_plugin", "override_username")
# The bot's own mark on a queued integration post (handled only to warn under it).
_INTEGRATION = "_bamboo_integration_post"


def not_from_a_person(post: dict[str, Any]) -> bool:
    """Whether an integration made ``post``: anyone holding an incoming webhook's URL posts as the person who
    created it, so a request or an answer read from such a post spoke for that person (who then became the
    session's requester, and so could not be its distinct approver)."""
    props = post.get("props")
    return isinstance(props, dict) and any(props.get(name) not in (None, "", False, "false") for name in _INTEGRATION_PROPS)


def analysis_post(result: AnalysisResult) -> str:
    """An analysis result as a post: the cause, who decided it and what the confidence means (the one
    reading every front end shows, `bamboo.analysis.provenance`), the stored resolution, the candidates.

    Every field is one line of the post, so each is inert on one line (line breaks spelled ``⏎``): "Chosen by"
    carries the model's override reason, whose line breaks posted a forged "Resolution" and "Chosen by" line."""
    said = provenance(result)

    def one(text: str) -> str:
        return inert_markdown(text, one_line=True)

    lines = [f"**Task {result.task_id} ({one(result.status or 'unknown')})**: root cause "
             f"**{one(result.root_cause)}** — confidence {one(said.confidence)}"]
    if said.first_answer:
        lines.insert(0, f"_{one(said.first_answer)}_")
    lines.append(f"Chosen by: {one(said.chosen_by)}")
    if result.resolution:
        lines.append(f"Resolution: {one(result.resolution)}")
    lines += [f"- candidate: {one(c.name)} ({c.breadth} clue types, {c.frequency} incidents)"
              for c in result.candidates[:3]]
    lines += [f"- suggestion: {one(s)}" for s in result.suggestions[:5]]
    return "\n".join(lines)


def opened_line(session_id: str) -> str:
    """How the bot's post opening a session's thread starts: a restarted bot follows only threads it opened."""
    return f"Session `{session_id}` opened"


def opened_post(session_id: str, first_run: str) -> str:
    """The start of the opening post: the session and the first run of its chain (what the thread is bound to)."""
    return f"{opened_line(session_id)} (run `{first_run}`)"


_OPENED_RUN = re.compile(r" \(run `([0-9A-Za-z-]{1,64})`\)")


def opened_run(own_posts: list[dict[str, Any]], session_id: str) -> str | None:
    """The first run named by this bot's post that opened ``session_id`` in a thread (its own posts only); "" when
    that post names none (a bot from before runs were recorded), None when the bot opened no session there."""
    for post in own_posts:
        message = post.get("message") or ""
        if message.startswith(opened_line(session_id)):
            found = _OPENED_RUN.match(message, len(opened_line(session_id)))
            return found[1] if found else ""
    return None


@dataclass
class Prompt:
    create_at: int
    turn: int
    code_hash: str
    review: str
    # The ids of the posts that showed it (several when split) and a hash of what they said (``posted_digest``);
    # ``intact`` is False when a restarted bot found one of them edited or missing.
    posts: tuple[str, ...] = ()
    digest: str = ""
    intact: bool = True


@dataclass
class Thread:
    root_id: str
    channel_id: str
    session_id: str
    first_run: str = ""  # the first run of the session's chain, as the opening post names it
    verbose: bool = False
    seen: int = 0
    prompts: list[Prompt] = field(default_factory=list)
    task: asyncio.Task | None = None

    def prompt_for(self, create_at: int) -> Prompt | None:
        """The latest review this thread showed before a reply posted at ``create_at``."""
        earlier = [p for p in self.prompts if p.create_at <= create_at]
        return earlier[-1] if earlier else None

    def prompt_tagged(self, tag: str, key: LocalKey) -> Prompt | None:
        """The review this thread showed with ``tag`` (the latest, should one have been posted twice)."""
        return next((p for p in reversed(self.prompts)
                     if review_tag(key, self.session_id, p.turn, p.code_hash, p.review) == tag), None)


class MattermostBot:
    def __init__(self, chat: MattermostChat, client: Client, settings: Settings, users: UserMap, key: LocalKey,
                 audit: AuditSink, poll_s: float = 1.0) -> None:
        self.chat, self.client, self.settings, self.users, self.key = chat, client, settings, users, key
        self.sessions = inv.InvestigationClient(client)  # every session request goes through the shared client
        self.analyses = AnalysisClient(client)  # and every analysis through its own
        self.audit, self.poll_s = audit, poll_s
        self.threads: dict[str, Thread] = {}
        self.unfollowed: set[str] = set()  # threads the bot opened and said it no longer follows
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.background: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ events
    async def run(self) -> None:
        me = await self.chat.login()
        log.info("signed in to Mattermost as %s (%s)", me.get("username"), me.get("id"))
        worker = asyncio.create_task(self._work())
        try:
            await self.chat.listen(self.on_event)
        finally:
            worker.cancel()

    async def on_event(self, raw: str) -> None:
        try:
            event = json.loads(raw)
            if event.get("event") != "posted":
                return
            post = json.loads(event["data"]["post"])
        except (ValueError, KeyError, TypeError):
            return
        if post.get("user_id") == self.chat.me.get("id") or post.get("type"):
            return  # its own posts and system messages
        if not_from_a_person(post):  # what integrations post under a person's id is never read as input; in a
            if post.get("root_id"):  # session's thread it is flagged as not the bot's
                self.queue.put_nowait({**post, _INTEGRATION: True})
            return
        self.queue.put_nowait(post)

    async def _work(self) -> None:
        """Posts are handled one at a time, in the order Mattermost sent them."""
        while True:
            post = await self.queue.get()
            try:
                await self.handle(post)
            except Exception:  # noqa: BLE001 — one bad post must not stop the bot
                log.exception("could not handle post %s", post.get("id"))
                await self._say(post["channel_id"], post.get("root_id") or post["id"],
                                "Something went wrong handling that; the bot's log has the details.")

    async def handle(self, post: dict[str, Any]) -> None:
        if post.get(_INTEGRATION):
            return await self._flag_integration_post(post)
        if not post.get("root_id"):
            command = parse_root(post.get("message", ""))
            if command is not None:
                await self._root_command(post, command)
            return
        thread = await self._thread_for(post["root_id"], post["channel_id"])
        if thread is not None:
            await self._thread_command(post, thread, parse_thread(post.get("message", "")))

    # ------------------------------------------------------------------ channel commands
    async def _root_command(self, post: dict[str, Any], command: Command) -> None:
        channel, root = post["channel_id"], post["id"]
        if command.kind == "help":
            return await self._say(channel, root, HELP)
        if command.kind == "invalid":
            return await self._say(channel, root, command.error)
        if command.task_id is not None and (why := task_problem({"jediTaskID": command.task_id})):
            return await self._say(channel, root, f"Cannot use that task id: {why}")  # before PanDA or Temporal
        identity = await self._identity(post, command.kind, None)
        if identity is None:
            return
        if command.kind == "pending":
            return await self._say(channel, root, pending_list(await self.sessions.list_pending()))
        if command.kind == "investigate":
            session_id = SESSION_PREFIX + root
            try:  # never one started elsewhere under this post's name (anyone can see the post id and race the bot)
                await self.sessions.start(inv.start_input(self.settings, session_id, identity, task_id=command.task_id,
                                                          symptom=command.symptom, startup_hypothesis=command.hypothesis),
                                          attach=False)
                first_run = await self.sessions.first_run(session_id)  # the chain this thread is bound to
            except inv.InvestigationError as exc:
                log.warning("not opening %s: %s", session_id, exc)
                return await self._say(channel, root, f"Not opened: {inert_markdown(str(exc))}; this thread is not "
                                                      "followed. Post the request again as a new message.")
            thread = Thread(root_id=root, channel_id=channel, session_id=session_id, first_run=first_run,
                            verbose=command.verbose)
            self.threads[root] = thread
            what = f"task {command.task_id}" if command.task_id else f"“{inert_markdown(command.symptom or '')}”"
            # An identity is any name the registry accepted ("ops-@here" is one): inert like every other name.
            await self._say(channel, root, f"{opened_post(session_id, first_run)} on {what} by "
                                           f"{inert_markdown(identity, one_line=True)}"
                            + (" (verbose narration in this thread)" if command.verbose else "")
                            + ". Ask in this thread; reviews are posted here.")
            self._follow(thread)
        elif command.kind == "analyze":
            task = asyncio.create_task(self._analyze(channel, root, command.task_id or 0))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _analyze(self, channel: str, root: str, task_id: int) -> None:
        from bamboo.panda.client import PandaClient
        from bamboo.panda.errors import PandaError
        from bamboo.panda.task_records import task_for_analysis

        try:
            async with PandaClient.from_settings(self.settings) as panda:
                task, note = await task_for_analysis(panda, task_id)
        except PandaError as exc:
            return await self._say(channel, root, f"Cannot read task {task_id} from PanDA: {inert_markdown(str(exc))}")
        if note:
            await self._say(channel, root, f"Note: {inert_markdown(note)}")
        await self._say(channel, root, f"Analysing task {task_id} (workflow `{analysis_id(task)}`, read-only)…")

        async def say_first(first: AnalysisResult) -> None:
            await self._say(channel, root, analysis_post(first))

        try:
            result = await self.analyses.analyze(
                task, exploration_threshold=self.settings.exploratory_investigation_threshold,
                model_deadline_s=self.settings.llm_timeout_s, on_first=say_first)
        except AnalysisError as exc:
            return await self._say(channel, root, f"Not analysed: {inert_markdown(str(exc), one_line=True)}")
        await self._say(channel, root, analysis_post(result))

    # ------------------------------------------------------------------ thread commands
    async def _thread_for(self, root_id: str, channel_id: str) -> Thread | None:
        """The session of this thread; a thread from before a restart is picked up again from Temporal, only when the
        bot opened it and the session's id still holds the run chain its opening post names."""
        if root_id in self.threads:
            return self.threads[root_id]
        session_id = SESSION_PREFIX + root_id
        refused: inv.NotASession | None = None
        try:
            if await self.sessions.execution_status(session_id) is None:
                return None  # not a session thread
        except inv.NotASession as exc:
            refused = exc
        posts = await self._own_posts(root_id)
        first_run = opened_run(posts, session_id)
        if first_run is None:
            # A session of this name the bot did not open here: anyone may start one named after any post
            # (`bamboo investigate --session mm-<post id>`), and adopting its thread signed every mapped member's
            # reply in it as a request to that session, in their name.
            log.warning("thread %s names session %s, which this bot did not open there: not followed",
                        root_id, session_id)
            return None
        if refused is None and not first_run:
            refused = inv.NotThisSession(f"the post that opened {session_id} here names no run (an earlier version "
                                         "of this bot), so whether the session now under that id is the one it "
                                         "opened cannot be told")
        try:
            if refused is not None:
                raise refused
            # A closed session's id can be taken again, by a workflow of a requester's own or by another
            # investigation: narrated, its worker's story ("bob chose run_once") was posted in the bot's voice.
            entries = await self.sessions.transcript(session_id, first_run=first_run)
        except inv.NotASession as exc:
            log.warning("thread %s: %s; not followed", root_id, exc)
            await self._unfollow(root_id, channel_id, exc)
            return None
        thread = Thread(root_id=root_id, channel_id=channel_id, session_id=session_id, first_run=first_run,
                        seen=max((e.seq for e in entries), default=0), prompts=self._reviews_in(posts))
        self.threads[root_id] = thread
        self._follow(thread)
        return thread

    async def _own_posts(self, root_id: str) -> list[dict[str, Any]]:
        """This bot's own posts in the thread, oldest first, read back from Mattermost (it needs no worker)."""
        mine = self.chat.me.get("id")
        return [p for p in await self.chat.thread_posts(root_id) if mine and p.get("user_id") == mine]

    async def _unfollow(self, root_id: str, channel_id: str, why: Exception) -> None:
        """Say once in a thread the bot opened that it no longer follows its session, and why."""
        if root_id in self.unfollowed:
            return
        self.unfollowed.add(root_id)
        await self._say(channel_id, root_id, f"This thread no longer follows a session: {inert_markdown(str(why))}. "
                                             "Nothing posted here is sent anywhere; open a new session in the channel.")

    @staticmethod
    def _reviews_in(own_posts: list[dict[str, Any]]) -> list[Prompt]:
        """The reviews among this bot's posts in a thread, oldest first.

        After a restart a reply answers the review shown before it, as before the restart; never the session's
        current review, which the thread may not have shown (an edit or a new turn asked for elsewhere while the
        bot was down: a `y` typed under turn 4 approved turn 5's code). Only this bot's own posts count. Each review
        keeps the posts that showed it (a split one's later posts by their part line) and a hash of what they say
        now; one found edited, or with a post missing, is not ``intact``: no answer that runs code is taken for it."""
        prompts = []
        for index, post in enumerate(own_posts):
            shown = reviewed_in(post.get("message") or "")
            if shown is None:
                continue
            parts = [post]
            first = review_part(post.get("message") or "")
            if first is not None:
                tag, _, count = first
                for later in own_posts[index + 1:]:
                    if len(parts) == count:
                        break
                    if review_part(later.get("message") or "") == (tag, len(parts) + 1, count):
                        parts.append(later)
                complete = first[1] == 1 and len(parts) == count
            else:
                complete = True
            edited = any(p.get("edit_at") or p.get("delete_at") for p in parts)
            prompts.append(Prompt(int(post.get("create_at") or 0), *shown,
                                  posts=tuple(str(p.get("id") or "") for p in parts),
                                  digest=posted_digest([p.get("message") or "" for p in parts]),
                                  intact=complete and not edited))
        return prompts

    async def _still_as_posted(self, thread: Thread, prompt: Prompt) -> bool:
        """Whether every post of the review ``prompt`` still says what the bot posted: none edited (``edit_at``),
        none deleted, the same text (``posted_digest``). Read back from Mattermost when an answer names it."""
        if not prompt.intact or not prompt.posts or not all(prompt.posts):
            return False
        mine = self.chat.me.get("id")
        now = {p.get("id"): p for p in await self.chat.thread_posts(thread.root_id)}
        found = [now.get(post_id) for post_id in prompt.posts]
        if any(p is None or p.get("user_id") != mine or p.get("edit_at") or p.get("delete_at") for p in found):
            return False
        return posted_digest([(p or {}).get("message") or "" for p in found]) == prompt.digest

    async def _flag_integration_post(self, post: dict[str, Any]) -> None:
        """An integration's post in a followed session thread: a webhook may take the bot's name and icon and show
        a review's real tag beside other code. Warn right under it; it is never read as input."""
        thread = await self._thread_for(post["root_id"], post["channel_id"])
        if thread is None:
            return
        me = inert_markdown(str(self.chat.me.get("username") or "?"), one_line=True)
        await self._say(thread.channel_id, thread.root_id,
                        f"⚠ The post above was made by an integration (a webhook, a bot or a plugin), not by this bot "
                        f"(user {me}), whatever name and picture it shows: reviews here come only from this bot's own "
                        "posts. Do not answer it.")

    async def _thread_command(self, post: dict[str, Any], thread: Thread, command: Command) -> None:
        channel, root = thread.channel_id, thread.root_id
        if command.kind == "invalid":
            return await self._say(channel, root, command.error)
        # Channel membership grants nothing: showing what a session may run, or turning on narration of its code
        # and tool results, is for registered people as much as asking is.
        identity = await self._identity(post, command.kind, thread)
        if identity is None:
            return
        if command.kind == "verbose":
            thread.verbose = command.verbose
            return await self._say(channel, root, f"Verbose narration {'on' if command.verbose else 'off'} in this "
                                                  "thread (it changes what is shown, never what may run).")
        if command.kind == "approvals":
            try:
                standing = await self.sessions.approvals(thread.session_id, first_run=thread.first_run)
            except inv.InvestigationError as exc:
                return await self._say(channel, root, f"Not read: {inert_markdown(str(exc))}")
            return await self._say(channel, root, approvals_post(standing))
        speaker = inv.Speaker(identity, self.key, deployment=self.settings.resolved_deployment())
        delivery: inv.Delivery | None = None
        try:
            if command.kind == "decision":
                if command.tag is not None:
                    prompt = thread.prompt_tagged(command.tag, self.key)
                    if prompt is None:
                        return await self._say(channel, root, f"No review in this thread shows the tag "
                                                              f"`{command.tag}`; answer with the tag of the review "
                                                              "you read.")
                else:
                    prompt = thread.prompt_for(int(post.get("create_at") or 0))
                if prompt is None:
                    return await self._say(channel, root, "No review was posted in this thread before your reply.")
                assert command.decision is not None  # the parser sets it for every decision command
                if command.decision.runs_code and not await self._still_as_posted(thread, prompt):
                    # Someone Mattermost lets edit others' posts (an admin, the bot's token) swapped the code the
                    # approver read; the tag and header stayed. Posted again by the narration while it waits.
                    thread.prompts = [p for p in thread.prompts if p is not prompt]
                    return await self._say(channel, root, f"Not sent: the review post for `{command.tag}` was changed "
                                                          "(edited or deleted) after this bot posted it, so it may not "
                                                          "show what you would approve; ask for the review again (it is "
                                                          "posted again while it waits) and answer the new post.")
                delivery = await self.sessions.decide(thread.session_id, speaker, prompt.turn, prompt.code_hash,
                                                      command.decision, command.replacement_code, review=prompt.review,
                                                      first_run=thread.first_run)
            elif command.kind == "revoke":
                delivery = await self.sessions.revoke(thread.session_id, speaker, command.target or "",
                                                      first_run=thread.first_run)
            elif command.kind == "message":
                delivery = await self.sessions.message(thread.session_id, speaker, command.text,
                                                       force_tool=command.force_tool, fresh_code=command.fresh_code,
                                                       codify=command.codify, first_run=thread.first_run)
        except ValidationError as exc:
            await self._say(channel, root, f"Not sent: {inert_markdown(exc.errors()[0]['msg'])}")
        except inv.InvestigationError as exc:
            if exc.refusal is None:  # the session did not see it (unreachable): say so here
                await self._say(channel, root, f"Not delivered: {inert_markdown(str(exc))}")
            # a refusal is in the session's transcript, which this thread narrates
        if delivery is not None and delivery.durable:  # kept by the server until a worker runs: say so
            await self._say(channel, root, f"{inert_markdown(identity, one_line=True)}: {delivery.detail}.")

    # ------------------------------------------------------------------ identity
    async def _identity(self, post: dict[str, Any], request: str, thread: Thread | None) -> str | None:
        """The registered identity the deployment mapped this Mattermost user to; else refuse and audit."""
        identity = self.users.identity(post.get("user_id", ""))
        if identity is not None:
            return identity
        detail = ("your Mattermost account is not mapped to a registered person here, and channel membership "
                  "grants nothing; ask the deployment to add your user id to the Mattermost user mapping")
        await self.audit.append(AuditEvent(kind="front_end_refused", actor=f"mattermost:{post.get('user_id')}", body={
            "front_end": self.key.identity, "request": request, "reason": "unmapped_user", "detail": detail,
            "session": thread.session_id if thread else None, "channel_id": post.get("channel_id"),
            "post_id": post.get("id"), "message": (post.get("message") or "")[:500]}))
        await self._say(post["channel_id"], thread.root_id if thread else post["id"], f"Refused: {detail}.")
        return None

    # ------------------------------------------------------------------ following a session
    def _follow(self, thread: Thread) -> None:
        if thread.task is None or thread.task.done():
            thread.task = asyncio.create_task(self._narrate(thread))

    async def _narrate(self, thread: Thread) -> None:
        polls = 0
        while True:
            try:
                entries = await self.sessions.transcript(thread.session_id, thread.seen, first_run=thread.first_run)
                for entry in entries:
                    thread.seen = max(thread.seen, entry.seq)
                    text = entry_post(entry, thread.verbose)
                    if text:
                        await self._say(thread.channel_id, thread.root_id, text)
                view = await self.sessions.pending(thread.session_id, first_run=thread.first_run)
                if view is not None and not any((p.turn, p.code_hash, p.review) == view.shown_as and p.intact
                                                for p in thread.prompts):
                    # A review not shown yet, the same code reviewed again with another verdict, or a review whose
                    # post was found changed: posted anew.
                    transcript = await self.sessions.transcript(thread.session_id, first_run=thread.first_run)
                    tag = review_tag(self.key, thread.session_id, view.turn, view.code_hash, view.review)
                    posted = await self.chat.post_parts(
                        thread.channel_id, review_parts(review_post(view, edit_diff(view, transcript), tag=tag), tag),
                        thread.root_id)
                    thread.prompts.append(Prompt(int(posted[0].get("create_at") or 0), view.turn, view.code_hash,
                                                 view.review, posts=tuple(str(p.get("id") or "") for p in posted),
                                                 digest=posted_digest([p.get("message") or "" for p in posted])))
                polls += 1
                if polls % STATUS_EVERY == 0 and not entries:
                    status = await self.sessions.execution_status(thread.session_id, first_run=thread.first_run)
                    if status is not None and status != "running":
                        await self._say(thread.channel_id, thread.root_id, f"Session `{thread.session_id}` is {status}.")
                        return
            except inv.NotASession as exc:  # the id now holds another chain: nothing of it is narrated here
                log.warning("following %s: %s", thread.session_id, exc)
                await self._unfollow(thread.root_id, thread.channel_id, exc)
                return
            except (RPCError, inv.InvestigationError) as exc:
                log.warning("following %s: %s", thread.session_id, exc)
            await asyncio.sleep(self.poll_s)

    async def _say(self, channel_id: str, root_id: str, message: str) -> None:
        await self.chat.post(channel_id, message, root_id)
