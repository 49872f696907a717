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
before it, never one the thread did not show. ``--verbose`` narrates intent, code, policy and each tool call in
that thread only; it changes what is shown, never what may run.

Whatever the bot posts that it did not write itself (a symptom, an analysis's causes and suggestions, an
error's message) goes through ``inert_markdown``, as the session's narration does in ``render``.
"""

from __future__ import annotations

import asyncio
import json
import logging
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
from bamboo.frontends.mattermost.render import approvals_post, entry_post, pending_list, review_post, reviewed_in
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


@dataclass
class Prompt:
    create_at: int
    turn: int
    code_hash: str
    review: str


@dataclass
class Thread:
    root_id: str
    channel_id: str
    session_id: str
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
        if post.get("user_id") == self.chat.me.get("id") or post.get("type") or not_from_a_person(post):
            return  # its own posts, system messages, and what integrations post under a person's id
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
            except inv.InvestigationError as exc:
                log.warning("not opening %s: %s", session_id, exc)
                return await self._say(channel, root, f"Not opened: {inert_markdown(str(exc))}; this thread is not "
                                                      "followed. Post the request again as a new message.")
            thread = Thread(root_id=root, channel_id=channel, session_id=session_id, verbose=command.verbose)
            self.threads[root] = thread
            what = f"task {command.task_id}" if command.task_id else f"“{inert_markdown(command.symptom or '')}”"
            # An identity is any name the registry accepted ("ops-@here" is one): inert like every other name.
            await self._say(channel, root, f"{opened_line(session_id)} on {what} by {inert_markdown(identity, one_line=True)}"
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
        """The session of this thread; a thread from before a restart is picked up again from Temporal."""
        if root_id in self.threads:
            return self.threads[root_id]
        session_id = SESSION_PREFIX + root_id
        if await self.sessions.execution_status(session_id) is None:
            return None  # not a session thread
        posts = await self._own_posts(root_id)
        if not any((p.get("message") or "").startswith(opened_line(session_id)) for p in posts):
            # A session of this name the bot did not open here: anyone may start one named after any post
            # (`bamboo investigate --session mm-<post id>`), and adopting its thread signed every mapped member's
            # reply in it as a request to that session, in their name.
            log.warning("thread %s names session %s, which this bot did not open there: not followed",
                        root_id, session_id)
            return None
        entries = await self.sessions.transcript(session_id)
        thread = Thread(root_id=root_id, channel_id=channel_id, session_id=session_id,
                        seen=max((e.seq for e in entries), default=0), prompts=self._reviews_in(posts))
        self.threads[root_id] = thread
        self._follow(thread)
        return thread

    async def _own_posts(self, root_id: str) -> list[dict[str, Any]]:
        """This bot's own posts in the thread, oldest first, read back from Mattermost (it needs no worker)."""
        mine = self.chat.me.get("id")
        return [p for p in await self.chat.thread_posts(root_id) if mine and p.get("user_id") == mine]

    @staticmethod
    def _reviews_in(own_posts: list[dict[str, Any]]) -> list[Prompt]:
        """The reviews among this bot's posts in a thread, oldest first.

        After a restart a reply answers the review shown before it, as before the restart; never the session's
        current review, which the thread may not have shown (an edit or a new turn asked for elsewhere while the
        bot was down: a `y` typed under turn 4 approved turn 5's code). Only this bot's own posts count."""
        prompts = []
        for post in own_posts:
            shown = reviewed_in(post.get("message") or "")
            if shown is not None:
                prompts.append(Prompt(int(post.get("create_at") or 0), *shown))
        return prompts

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
            return await self._say(channel, root, approvals_post(await self.sessions.approvals(thread.session_id)))
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
                delivery = await self.sessions.decide(thread.session_id, speaker, prompt.turn, prompt.code_hash,
                                                      command.decision, command.replacement_code, review=prompt.review)
            elif command.kind == "revoke":
                delivery = await self.sessions.revoke(thread.session_id, speaker, command.target or "")
            elif command.kind == "message":
                delivery = await self.sessions.message(thread.session_id, speaker, command.text,
                                                       force_tool=command.force_tool, fresh_code=command.fresh_code,
                                                       codify=command.codify)
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
                entries = await self.sessions.transcript(thread.session_id, thread.seen)
                for entry in entries:
                    thread.seen = max(thread.seen, entry.seq)
                    text = entry_post(entry, thread.verbose)
                    if text:
                        await self._say(thread.channel_id, thread.root_id, text)
                view = await self.sessions.pending(thread.session_id)
                if view is not None and not any((p.turn, p.code_hash, p.review) == view.shown_as
                                                for p in thread.prompts):
                    # A review not shown yet, or the same code reviewed again with another verdict: posted anew.
                    transcript = await self.sessions.transcript(thread.session_id)
                    tag = review_tag(self.key, thread.session_id, view.turn, view.code_hash, view.review)
                    posted = await self.chat.post(thread.channel_id,
                                                  review_post(view, edit_diff(view, transcript), tag=tag),
                                                  thread.root_id)
                    thread.prompts.append(Prompt(int(posted.get("create_at") or 0), view.turn, view.code_hash,
                                                 view.review))
                polls += 1
                if polls % STATUS_EVERY == 0 and not entries:
                    status = await self.sessions.execution_status(thread.session_id)
                    if status is not None and status != "running":
                        await self._say(thread.channel_id, thread.root_id, f"Session `{thread.session_id}` is {status}.")
                        return
            except (RPCError, inv.InvestigationError) as exc:
                log.warning("following %s: %s", thread.session_id, exc)
            await asyncio.sleep(self.poll_s)

    async def _say(self, channel_id: str, root_id: str, message: str) -> None:
        await self.chat.post(channel_id, message, root_id)
