"""`bamboo investigate`, `bamboo approvals`, `bamboo approve`: the human side of the Investigation workflow.

The session lives in Temporal, not in this process: quitting (or losing the terminal) detaches, and
`--attach SESSION` picks the session up again from any machine. Reviews can be answered here, with
`bamboo approve` from another terminal, or with `temporal workflow signal` plus `bamboo sign`; every
request is signed with the operator's key and the workflow checks each answer against the turn and code
hash it names and the deployment's approver registry.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import typer
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from temporalio.client import Client

from bamboo.approvals.keys import LocalKey, SigningKeyError
from bamboo.cli.common import console, err_console, fail, run
from bamboo.cli.review_view import pending_panel, review_words, transcript_code
from bamboo.frontends.inert_text import inert_markup, inert_rich
from bamboo.frontends.operator_lines import HELP, parse_line
from bamboo.frontends.review import CHOICE_KEYS, CHOICE_WORDS, choices_line, said
from bamboo.investigation import client as inv
from bamboo.investigation.contract import PendingView, TranscriptEntry
from bamboo.settings import Settings, get_settings
from bamboo.telemetry import progress_event, untraced
from bamboo.temporal_client import TemporalUnavailable, connect
from policy.code_identity import short_hash
from policy.decisions import DecisionKind
from policy.identity import IdentityError

POLL_S = 0.4
MIN_KEY = inv.MIN_HASH_PREFIX
TERMINAL_KINDS = {"reply", "notice", "finding", "refused_run", "refused_request"}
QUIET_KINDS = {"intent", "code", "policy", "run", "operator", "decision"}
QUIT_WORDS = ("/quit", "/exit", "/detach")


def default_identity() -> str:
    return os.environ.get("BAMBOO_OPERATOR") or getpass.getuser()


def speaker_for(settings: Settings, identity: str | None) -> inv.Speaker:
    """The operator as the CLI speaks for them: canonical identity plus their local signing key."""
    try:
        speaker = inv.Speaker.of(settings, identity or default_identity())
    except (IdentityError, SigningKeyError) as exc:
        fail(str(exc))
        raise
    if speaker.key is None:
        err_console.print(
            f"[yellow]warning:[/] no signing key for {speaker.identity} in {settings.resolved_keys_dir()}; requests "
            f"go unsigned and a deployment that requires signatures refuses them (`bamboo keys create --as "
            f"{speaker.identity}`, then have it registered)")
    return speaker


def register(app: typer.Typer) -> None:
    app.command("investigate")(investigate)
    app.command("approvals")(approvals_cmd)
    app.command("approve")(approve_cmd)


# --------------------------------------------------------------------------------- investigate
def investigate(
    task_id: int | None = typer.Option(None, "--task-id", min=1, max=2**63 - 1, help="PanDA jediTaskID to investigate"),
    symptom: str | None = typer.Option(None, "--symptom", help="describe the problem when there is no task id"),
    attach: str | None = typer.Option(None, "--attach", help="attach to a running session by its id"),
    session: str | None = typer.Option(None, "--session", help="name for a new session (default: generated); an ended "
                                       "session's name is refused, a running one's is attached to"),
    identity: str | None = typer.Option(None, "--as", help="who you are (default: $BAMBOO_OPERATOR or your login)"),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="narrate intent, strategy and each tool call"),
    no_hypothesis: bool = typer.Option(False, "--no-hypothesis", help="skip the automatic start-up hypothesis"),
    cause: str | None = typer.Option(None, "--cause", help="the cause an analysis chose (bamboo analyze): stored "
                                                          "procedures captured for another cause are not reused"),
) -> None:
    """Investigate a task with human-reviewed code turns (a durable session you can detach from).

    Which code may run without a prompt, and who may approve what, is the deployment's policy (worker
    settings and approver registry), not this command's.
    """
    chosen = [x for x in (task_id, symptom, attach) if x is not None]
    if len(chosen) != 1:
        fail("give exactly one of --task-id N, --symptom TEXT or --attach SESSION")
    settings = get_settings()
    speaker = speaker_for(settings, identity)
    run(_investigate(settings, speaker, task_id, symptom, attach, session, verbose, not no_hypothesis, cause))


async def _connect(settings: Settings) -> Client:
    try:
        return await connect(settings)
    except TemporalUnavailable as exc:
        fail(str(exc))
        raise


async def _investigate(settings: Settings, speaker: inv.Speaker, task_id: int | None, symptom: str | None,
                       attach: str | None, session: str | None, verbose: bool, hypothesis: bool,
                       cause: str | None = None) -> None:
    client = await _connect(settings)
    ops = inv.InvestigationClient(client)
    if attach:
        session_id = attach
        if await ops.execution_status(session_id) is None:
            fail(f"no session {session_id}; `bamboo approvals` lists sessions waiting for a decision")
    else:
        session_id = session or f"{speaker.identity}-{uuid.uuid4().hex[:8]}"
        if session:
            await _name_is_free(ops, session)
        await ops.start(inv.start_input(settings, session_id, speaker.identity, task_id=task_id,
                                        symptom=symptom, startup_hypothesis=hypothesis, cause=cause))
    console.print(Panel(f"session [bold]{session_id}[/] (workflow {inv.workflow_id(session_id)})\n"
                        f"attach later: bamboo investigate --attach {session_id}\n{HELP}", title="investigate"))
    loop = SessionLoop(ops, session_id, speaker, verbose, LineReader())
    try:
        if not await loop.follow_until_idle(expect_turn=None):
            return _detached(session_id)
        while True:
            line = await loop.reader.read("you> ")
            if line is None or line.strip() in QUIT_WORDS:
                return _detached(session_id)
            line = line.strip()
            if not line:
                continue
            if not await loop.command(line):
                return
    finally:
        loop.reader.close()


async def _name_is_free(ops: inv.InvestigationClient, session: str) -> None:
    """A session's name is its workflow id, kept after the session ends: a new session cannot take an ended one's
    name (starting would attach to the ended run). A running one is attached to, as a repeated start is, and said."""
    status = await ops.execution_status(session)
    if status is None:
        return
    if status != "running":
        fail(f"session {session} already ran ({status}); choose another --session name, or leave it out for a "
             "generated one", code=2)
    console.print(inert_rich(f"session {session} already runs: attached to it (its task is the one it started with)"))


def _detached(session_id: str) -> None:
    console.print(f"detached; the session keeps running. Re-attach: bamboo investigate --attach {session_id}")


class LineReader:
    """Reads standard input on a thread, so a prompt can be given up when the review is answered elsewhere
    (a blocking ``input()`` would keep a stale prompt and read the next line as its answer)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._closed = False
        threading.Thread(target=self._pump, name="stdin", daemon=True).start()

    def _pump(self) -> None:
        while not self._closed:
            line = sys.stdin.readline()
            self._loop.call_soon_threadsafe(self._queue.put_nowait, line.rstrip("\n") if line else None)
            if not line:
                return

    async def read(self, prompt: str, timeout: float | None = None) -> str | None:
        """The next line (None at end of input); raises TimeoutError when ``timeout`` passes first."""
        if prompt:
            console.print(prompt, end="", markup=False, highlight=False)
        if timeout is None:
            return await self._queue.get()
        return await asyncio.wait_for(self._queue.get(), timeout)

    def close(self) -> None:
        self._closed = True


class SessionLoop:
    """Prints the transcript as it grows and answers review prompts, for one attached terminal."""

    def __init__(self, ops: inv.InvestigationClient, session_id: str, speaker: inv.Speaker, verbose: bool,
                 reader: LineReader) -> None:
        self.ops = ops
        self.session_id = session_id
        self.speaker = speaker
        self.verbose = verbose
        self.reader = reader
        self.seen = 0
        self.prompted: set[tuple[int, str, str]] = set()  # PendingView.shown_as

    async def command(self, line: str) -> bool:
        """Handle one input line; False when the session is over or the operator detached."""
        parsed = parse_line(line)
        try:
            if parsed.kind == "approvals":
                show_approvals(await self.ops.approvals(self.session_id))
                return True
            if parsed.kind == "revoke":
                self._said(await self.ops.revoke(self.session_id, self.speaker, parsed.target))
                await asyncio.sleep(1.0)
                await self.print_new()
                return True
            if parsed.kind == "finalize":
                cause = ((await self.reader.read("cause> ")) or "").strip()
                resolution = ((await self.reader.read("resolution> ")) or "").strip()
                if not cause or not resolution:
                    console.print("finalize needs both a cause and a resolution; nothing was sent")
                    return True
                self._said(await self.ops.finalize(self.session_id, self.speaker, cause, resolution))
                await self.wait_closed()
                return False
            if parsed.kind == "abandon":
                self._said(await self.ops.abandon(self.session_id, self.speaker, parsed.reason))
                await self.wait_closed()
                return False
            if parsed.kind != "message":
                console.print(parsed.error or HELP)
                return True
            sent = await self.ops.message(self.session_id, self.speaker, parsed.text, force_tool=parsed.force_tool,
                                          fresh_code=parsed.fresh_code, codify=parsed.codify)
            self._said(sent)
        except inv.InvestigationError as exc:
            console.print(f"[red]{'refused' if exc.refusal else 'not sent'}: {inert_markup(str(exc), one_line=True)}[/]")
            return True
        if not await self.follow_until_idle(expect_turn=parsed.text, sent=sent):
            _detached(self.session_id)
            return False
        return True

    @staticmethod
    def _said(delivery: inv.Delivery) -> None:
        """A request the server keeps for a worker is said to be so; one judged already needs no word."""
        if delivery.durable:
            console.print(f"[yellow]{inert_markup(delivery.detail, one_line=True)}[/]")

    async def wait_closed(self) -> None:
        result = await self.ops.result(self.session_id)
        await self.print_new()
        console.print(inert_rich(f"session {result.status.value}: cause={result.cause!r} "
                                 f"procedures={result.procedures}"))

    async def follow_until_idle(self, expect_turn: str | None, sent: inv.Delivery | None = None) -> bool:
        """Follow the transcript until the turn for ``expect_turn`` (the message text, ``sent`` as delivered)
        has an outcome; False when the operator detached at a review prompt."""
        turn: int | None = None
        quiet_polls = 0
        while True:
            entries = await self.print_new()
            for entry in entries:
                if expect_turn is not None and entry.kind == "operator" and entry.text == expect_turn:
                    turn = entry.turn
                if turn is None and sent is not None and self._refuses(entry, sent):
                    return True  # the message itself was refused; the transcript said why
            view = await self._pending()
            if view is not None and view.shown_as not in self.prompted:
                self.prompted.add(view.shown_as)  # reviewed again: asked again
                progress_event("session.review", {"session": self.session_id, "turn": view.turn,
                                                  "code_hash": view.code_hash})
                if not await self.review(view):
                    return False
                continue
            done = turn is not None and any(e.turn == turn and e.kind in TERMINAL_KINDS for e in entries)
            if done or (expect_turn is None and view is None and not entries):
                quiet_polls += 1
                if done or quiet_polls >= 3:
                    return True
            await asyncio.sleep(POLL_S)

    def _refuses(self, entry: TranscriptEntry, sent: inv.Delivery) -> bool:
        """Whether ``entry`` refuses the request ``sent``: another client's refusal does not, and neither does
        the refusal of a copy as a replay (a request that fell back to a signal after its update timed out,
        when the update had been taken: the copy is refused, the request stands)."""
        if entry.kind != "refused_request":
            return False
        if sent.nonce is None:
            return entry.data.get("nonce") is None and entry.actor == self.speaker.identity
        return entry.data.get("nonce") == sent.nonce and entry.data.get("refusal") != "replayed"

    async def print_new(self) -> list[TranscriptEntry]:
        with untraced():
            entries = await self.ops.transcript(self.session_id, self.seen)
        if entries:
            progress_event("session.transcript", {"session": self.session_id, "entries": len(entries),
                                                  "kinds": sorted({e.kind for e in entries})})
        for entry in entries:
            self.seen = max(self.seen, entry.seq)
            print_entry(entry, self.verbose)
        return entries

    async def review(self, view: PendingView) -> bool:
        """Ask for a decision on ``view``; False when the operator detached (/quit)."""
        show_pending(view)
        keys = "/".join(CHOICE_KEYS[c] for c in view.choices)
        prompt = f"decision [{keys}]> "
        while True:
            try:
                line = await self.reader.read(prompt, timeout=POLL_S * 3)
            except asyncio.TimeoutError:
                prompt = ""
                if not await self._still_pending(view):
                    console.print(f"\nturn {view.turn} ({short_hash(view.code_hash)}) was answered elsewhere; "
                                  "this prompt is withdrawn")
                    return True
                continue
            if line is None or line.strip() in QUIT_WORDS:
                return False
            answer = line.strip() or "n"
            prompt = f"decision [{keys}]> "
            try:
                kind = inv.parse_decision(answer)
            except inv.InvestigationError as exc:
                console.print(str(exc))
                continue
            if kind not in view.choices:
                console.print(f"{CHOICE_WORDS[kind]} is not offered for this code; choose {keys}")
                continue
            replacement = edit_in_editor(view.code) if kind is DecisionKind.EDIT else None
            if kind is DecisionKind.EDIT and (replacement is None or not replacement.strip()):
                console.print("the edit was empty or the editor failed; choose again")
                continue
            try:
                self._said(await self.ops.decide(self.session_id, self.speaker, view.turn, view.code_hash, kind,
                                                 replacement, grants=inv.grants_answered(view, kind),
                                                 review=view.review))
            except inv.InvestigationError as exc:
                console.print(f"[red]refused: {inert_markup(str(exc))}[/]")
                if await self._still_pending(view):
                    continue
            return True

    async def _pending(self) -> PendingView | None:
        """The review waiting now; a poll every POLL_S, so it makes no span (what it found is an event)."""
        with untraced():
            return await self.ops.pending(self.session_id)

    async def _still_pending(self, view: PendingView) -> bool:
        now = await self._pending()
        return now is not None and now.shown_as == view.shown_as


def edit_in_editor(code: str) -> str | None:
    editor = os.environ.get("EDITOR") or os.environ.get("VISUAL") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(code)
        path = Path(fh.name)
    try:
        subprocess.run([*shlex.split(editor), str(path)], check=True)
        return path.read_text()
    except (OSError, subprocess.CalledProcessError) as exc:
        console.print(f"[red]editor {editor!r} failed: {exc}[/]")
        return None
    finally:
        path.unlink(missing_ok=True)


def print_entry(entry: TranscriptEntry, verbose: bool) -> None:
    """One transcript entry. Its text and the tool calls' fields are the model's or a tool's words: printed
    inert (``inert_rich``), in a column of their own after the entry's kind, so no line of them starts a row."""
    if entry.kind in QUIET_KINDS and not verbose:
        return
    if entry.kind == "reuse" and not entry.data.get("chosen") and not verbose:
        return  # why no stored procedure fitted: narration, like the intent
    if entry.kind == "code":
        console.print(inert_rich(f"strategy: {entry.data.get('strategy') or '-'}; tools: {entry.data.get('tools')}",
                                 "dim", one_line=True))
        console.print(transcript_code(entry.text))
        return
    if entry.kind == "run":
        for call in entry.data.get("calls", []):
            reason = f" {call['reason']}" if call.get("reason") else ""
            args = f"({call['args_preview']})" if call.get("args_preview") else ""
            shape = f" → {call['result_shape']}" if call.get("result_shape") else ""
            console.print(inert_rich(f"  tool {call['tool']}{args} → {call['outcome']}{shape} ({call['bytes']} bytes)"
                                     f"{reason}", "dim", one_line=True))
    style = {"reply": "bold", "notice": "bold blue", "refused_run": "red", "refused_decision": "red", "refused_request": "red",
             "suggestion": "yellow", "hypothesis": "cyan", "grant": "magenta", "revoke": "magenta",
             "reuse": "cyan"}.get(entry.kind, "dim")
    who = f"{entry.actor}: " if entry.actor and entry.kind in ("decision", "refused_decision", "operator") else ""
    row = Table.grid(padding=(0, 1, 0, 0))
    row.add_column(no_wrap=True)
    row.add_column(overflow="fold")
    row.add_row(Text(f"[{entry.kind}]", style=style), inert_rich(who + entry.text))
    console.print(row)


def show_pending(view: PendingView) -> None:
    """The model's words first, labelled as such and outside the verdict's panel; then the panel, built from the
    workflow's facts, and the choices right under it, so the last thing above the prompt is trusted."""
    console.print(review_words(view))
    console.print(pending_panel(view))
    console.print(choices_line(view))


def show_approvals(view) -> None:
    table = Table("kind", "key", "policy / procedure", "by", "since")
    for column in table.columns:
        column.overflow = "fold"
    for hash_, policy in sorted(view.session_policies.items()):
        table.add_row("session", inert_rich(hash_), policy.policy.value, inert_rich(policy.approved_by), "")
    for name, grant in sorted(view.grants.items()):
        table.add_row("durable", inert_rich(grant.code_hash), inert_rich(name), inert_rich(grant.granted_by),
                      grant.granted_at.isoformat())
    console.print(table if view.session_policies or view.grants else "no standing approvals")


# --------------------------------------------------------------------------------- approvals / approve
def approvals_cmd(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """Pending reviews across all investigation sessions (found through Temporal's search attributes)."""
    settings = get_settings()

    async def go() -> None:
        ops = inv.InvestigationClient(await _connect(settings))
        unanswered: list[str] = []
        found = await ops.list_pending(unanswered=unanswered)
        if as_json:
            print(json.dumps([{"session": item.session_id, **item.view.model_dump(mode="json")} for item in found]))
        elif not found and not unanswered:
            console.print("no investigation is waiting for approval")
        elif found:
            _approvals_table(found)
        if unanswered:
            err_console.print(inert_rich(
                f"{len(unanswered)} session(s) wait for approval by Temporal's record but no worker answered for "
                f"them ({', '.join(unanswered[:5])}{', …' if len(unanswered) > 5 else ''}); start one (`bamboo dev "
                "up` or `bamboo worker`) to see their code", one_line=True))
            for session in unanswered[:20]:
                try:
                    memo = await ops.pending_memo(session)
                except inv.InvestigationError as exc:
                    err_console.print(inert_rich(f"  {session}: {exc}", one_line=True))
                    continue
                if memo is not None:  # what an answer names is on the server: it can be sent now
                    # State-changing code is not offered for approval unseen: only its rejection goes now.
                    answers = "y|n" if memo.read_only else "n"
                    later = ("its code shows once one answers" if memo.read_only
                             else "read its code once a worker answers before you approve it")
                    err_console.print(inert_rich(
                        f"  {session} turn {memo.turn} {memo.code_hash} asked by {memo.requester} "
                        f"({'read-only' if memo.read_only else 'STATE-CHANGING'}), review key {memo.review}: "
                        f"`bamboo approve {session} {memo.review[:MIN_KEY]} {answers}` is delivered now and judged "
                        f"when a worker runs ({later})", one_line=True))
            raise typer.Exit(1)

    def _approvals_table(found: list[inv.PendingApproval]) -> None:
        # The table is the facts; the model's summaries follow it, labelled, one line each, never in a row
        # beside the verdict.
        table = Table("session", "turn", "code hash", "review", "asked by", "effect", "tools", show_lines=True)
        for column in table.columns:
            column.overflow = "fold"  # ids and hashes wrap; they are never cut
        for item in found:
            v = item.view
            effect = "read-only" if v.read_only else "STATE-CHANGING"
            table.add_row(inert_rich(item.session_id), str(v.turn), inert_rich(v.code_hash), inert_rich(v.review),
                          inert_rich(v.requester),
                          effect, inert_rich(", ".join(v.tools)))
        console.print(table)
        for item in found:
            words = said(item.view)
            console.print(Text(words.label, style="bold yellow"))
            short = words.words[:200] + ("…" if len(words.words) > 200 else "")
            console.print(inert_rich(f"  {item.session_id} turn {item.view.turn}: {short}", one_line=True))
        console.print("answer with: bamboo approve SESSION REVIEW_KEY y|a|k|n, the key from the 'review' column "
                      f"(at least its first {MIN_KEY} characters; read the code first: bamboo investigate --attach "
                      "SESSION)")

    run(go())


def approve_cmd(
    session: str = typer.Argument(..., help="session id (see `bamboo approvals`)"),
    review_key: str = typer.Argument(..., help="the key of the review you read, as `bamboo approvals` (column "
                                                "'review') and the attached review print it; at least its first "
                                                f"{MIN_KEY} characters"),
    decision: str = typer.Argument(..., help="y (run once), a (auto-run), k (always ask), n (reject)"),
    identity: str | None = typer.Option(None, "--as", help="who you are (default: $BAMBOO_OPERATOR or your login)"),
    as_json: bool = typer.Option(False, "--json", help="the verdict as JSON (accepted, or refused and why); "
                                                       "the exit status is the same"),
) -> None:
    """Answer a pending review from any terminal; the decision is signed with your key and the session
    re-checks turn, hash, review, signature and the deployment's approver rules before it takes it. The review
    key, not the code hash, names what you answer: the same code can be reviewed again with other procedures
    or tools behind it, and that review is refused unless you read it (see docs/trust-model.md)."""
    settings = get_settings()
    speaker = speaker_for(settings, identity)
    try:
        kind = inv.parse_decision(decision)
    except inv.InvestigationError as exc:
        fail(str(exc))
    if kind is DecisionKind.EDIT:
        fail("edit needs the replacement code: attach with `bamboo investigate --attach SESSION` to edit")
    run(_approve(settings, session, review_key, kind, speaker, as_json))


async def _approve(settings: Settings, session: str, review_key: str, kind: DecisionKind,
                   speaker: inv.Speaker, as_json: bool = False) -> None:
    ops = inv.InvestigationClient(await _connect(settings))
    verdict = {"session": session, "identity": speaker.identity, "decision": kind.value}
    try:
        delivery = await ops.decide_by_review(session, speaker, review_key, kind)
    except inv.InvestigationError as exc:
        if as_json:
            print(json.dumps({**verdict, "accepted": False, "refusal": exc.refusal, "detail": str(exc)}))
            raise typer.Exit(1) from None
        fail(f"refused: {exc}" if exc.refusal else str(exc))
        return
    outcome = delivery.detail if delivery.durable else "accepted"
    if as_json:
        print(json.dumps({**verdict, "accepted": True, "turn": delivery.turn, "code_hash": delivery.code_hash,
                          "durable": delivery.durable, "detail": outcome}))
        return
    console.print(inert_markup(f"{session} turn {delivery.turn} {short_hash(delivery.code_hash or '')}: "
                               f"{speaker.identity} chose {kind.value} ({outcome})", one_line=True))


# --------------------------------------------------------------------------------- demo
DEMO_REQUESTER = "demo-requester"


async def provision_demo_identities(settings: Settings, operator: str, admin: LocalKey | None = None) -> None:
    """The embedded demo's two people, with keys in the local keys directory and registry entries signed by
    the embedded stack's administrator (``demo-admin``, pinned in <data dir>/admin-keys): both may ask and
    approve, but, as everywhere, not state-changing code they asked for themselves, so the demo's requester's
    answer to its own retry only accepts the stored procedure and the operator running the demo approves it.
    Idempotent. On the demo
    one person holds all three keys, and the demo says so. ``admin`` signs instead of the embedded
    administrator (a stack of one's own)."""
    from bamboo.approvals.admin import PinnedAdmins, embedded_admin
    from bamboo.approvals.keys import KeyStore
    from bamboo.approvals.registry import ApproverRegistry
    from bamboo.cli.store_access import opened_store
    from policy.approvers import Role

    admin = admin or embedded_admin(settings)
    keys = KeyStore(settings.resolved_keys_dir())
    everything = {Role.REQUEST, Role.APPROVE, Role.APPROVE_STATE_CHANGING}
    people = {DEMO_REQUESTER: everything, operator: everything}
    async with opened_store(settings) as store:
        registry = ApproverRegistry(store.pool, store.audit, PinnedAdmins.of(settings))
        for identity, roles in people.items():
            key = keys.load(identity) if keys.exists(identity) else keys.create(identity)
            await registry.ensure(admin, identity, key.public_key, roles)


DEMO_IDENTITIES_NOTICE = (
    "[yellow]Demo only:[/] this machine holds three keys, {requester} (asks), {me} (approves) and demo-admin "
    "(registers them), all yours. The rule that someone other than the requester approves state-changing code "
    "separates two keys here, not two people. A deployment pins its own administrators and registers each "
    "person's own key (README, 'Administrators'), and refuses to start with the demo's administrator.")
