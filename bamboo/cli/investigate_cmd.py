"""`bamboo investigate`, `bamboo approvals`, `bamboo approve`: the human side of the Investigation workflow.

The session lives in Temporal, not in this process: quitting (or losing the terminal) detaches, and
`--attach SESSION` picks the session up again from any machine. Reviews can be answered here, with
`bamboo approve` from another terminal, or with `temporal workflow signal`; the workflow checks every
answer against the turn and code hash it names.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import shlex
import subprocess
import tempfile
import uuid
from pathlib import Path

import typer
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from temporalio.client import Client

from bamboo.cli.common import console, fail, run
from bamboo.investigation import client as inv
from bamboo.models.investigation import PendingView, TranscriptEntry
from bamboo.settings import Settings, get_settings
from bamboo.temporal_client import TemporalUnavailable, connect
from policy.code_identity import short_hash
from policy.decisions import DecisionKind

POLL_S = 0.4
CHOICE_KEYS: dict[DecisionKind, str] = {
    DecisionKind.RUN_ONCE: "y", DecisionKind.AUTO_RUN: "a", DecisionKind.ALWAYS_ASK: "k",
    DecisionKind.EDIT: "e", DecisionKind.REJECT: "N",
}
CHOICE_WORDS: dict[DecisionKind, str] = {
    DecisionKind.RUN_ONCE: "run once", DecisionKind.AUTO_RUN: "auto-run", DecisionKind.ALWAYS_ASK: "always ask",
    DecisionKind.EDIT: "edit", DecisionKind.REJECT: "reject",
}
TERMINAL_KINDS = {"reply", "finding", "refused_run"}
QUIET_KINDS = {"intent", "code", "policy", "run", "operator", "decision"}
HELP = ("type a question or request; /tool TEXT forces a tool turn; /approvals; /revoke <hash-prefix|proc-name|all>; "
        "/finalize; /abandon; /quit detaches (the session keeps running)")


def default_identity() -> str:
    return os.environ.get("BAMBOO_OPERATOR") or getpass.getuser()


def register(app: typer.Typer) -> None:
    app.command("investigate")(investigate)
    app.command("approvals")(approvals_cmd)
    app.command("approve")(approve_cmd)


# --------------------------------------------------------------------------------- investigate
def investigate(
    task_id: int | None = typer.Option(None, "--task-id", help="PanDA jediTaskID to investigate"),
    symptom: str | None = typer.Option(None, "--symptom", help="describe the problem when there is no task id"),
    attach: str | None = typer.Option(None, "--attach", help="attach to a running session by its id"),
    session: str | None = typer.Option(None, "--session", help="id for a new session (default: generated)"),
    identity: str | None = typer.Option(None, "--as", help="who you are (default: $BAMBOO_OPERATOR or your login)"),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="narrate intent, strategy and each tool call"),
    no_hypothesis: bool = typer.Option(False, "--no-hypothesis", help="skip the automatic start-up hypothesis"),
    allow_mutating_autorun: bool | None = typer.Option(
        None, "--allow-mutating-autorun/--no-allow-mutating-autorun",
        help="let auto-run also cover state-changing procedures in this interactive session"),
) -> None:
    """Investigate a task with human-reviewed code turns (a durable session you can detach from)."""
    chosen = [x for x in (task_id, symptom, attach) if x is not None]
    if len(chosen) != 1:
        fail("give exactly one of --task-id N, --symptom TEXT or --attach SESSION")
    settings = get_settings()
    me = identity or default_identity()
    run(_investigate(settings, me, task_id, symptom, attach, session, verbose, not no_hypothesis,
                     allow_mutating_autorun))


async def _connect(settings: Settings) -> Client:
    try:
        return await connect(settings)
    except TemporalUnavailable as exc:
        fail(str(exc))
        raise


async def _investigate(settings: Settings, me: str, task_id: int | None, symptom: str | None, attach: str | None,
                       session: str | None, verbose: bool, hypothesis: bool, mutating: bool | None) -> None:
    client = await _connect(settings)
    if attach:
        session_id = attach
        try:
            await inv.pending(client, session_id)
        except inv.InvestigationError as exc:
            fail(f"{exc}; `bamboo approvals` lists sessions waiting for a decision")
    else:
        session_id = session or f"{me}-{uuid.uuid4().hex[:8]}"
        await inv.start(client, inv.start_input(settings, session_id, me, task_id=task_id, symptom=symptom,
                                                startup_hypothesis=hypothesis, allow_mutating_autorun=mutating))
    console.print(Panel(f"session [bold]{session_id}[/] (workflow {inv.workflow_id(session_id)})\n"
                        f"attach later: bamboo investigate --attach {session_id}\n{HELP}", title="investigate"))
    loop = SessionLoop(client, session_id, me, verbose)
    await loop.follow_until_idle(expect_turn=None)
    while True:
        line = (await asyncio.to_thread(_read_line, "you> ")).strip()
        if not line:
            continue
        if line in ("/quit", "/exit", "/detach"):
            console.print(f"detached; the session keeps running. Re-attach: bamboo investigate --attach {session_id}")
            return
        if not await loop.command(line):
            return


def _read_line(prompt: str) -> str:
    try:
        return input(prompt)
    except EOFError:
        return "/quit"


class SessionLoop:
    """Prints the transcript as it grows and answers review prompts, for one attached terminal."""

    def __init__(self, client: Client, session_id: str, me: str, verbose: bool) -> None:
        self.client = client
        self.session_id = session_id
        self.me = me
        self.verbose = verbose
        self.seen = 0
        self.prompted: set[tuple[int, str]] = set()

    async def command(self, line: str) -> bool:
        """Handle one input line; False when the session is over."""
        if line == "/approvals":
            show_approvals(await inv.approvals(self.client, self.session_id))
            return True
        if line.startswith("/revoke"):
            target = line.removeprefix("/revoke").strip()
            if not target:
                console.print("usage: /revoke <hash-prefix|proc-name|all>")
                return True
            await inv.revoke(self.client, self.session_id, target, self.me)
            await asyncio.sleep(1.0)
            await self.print_new()
            return True
        if line == "/finalize":
            cause = (await asyncio.to_thread(_read_line, "cause> ")).strip()
            resolution = (await asyncio.to_thread(_read_line, "resolution> ")).strip()
            if not cause or not resolution:
                console.print("finalize needs both a cause and a resolution; nothing was sent")
                return True
            await inv.finalize(self.client, self.session_id, cause, resolution, self.me)
            await self.wait_closed()
            return False
        if line.startswith("/abandon"):
            await inv.abandon(self.client, self.session_id, self.me, line.removeprefix("/abandon").strip())
            await self.wait_closed()
            return False
        force = line.startswith("/tool ")
        text = line.removeprefix("/tool ").strip() if force else line
        if text.startswith("/"):
            console.print(HELP)
            return True
        await inv.send_message(self.client, self.session_id, text, self.me, force_tool=force)
        await self.follow_until_idle(expect_turn=text)
        return True

    async def wait_closed(self) -> None:
        result = await inv.handle(self.client, self.session_id).result()
        await self.print_new()
        console.print(f"session {result.status.value}: cause={result.cause!r} procedures={result.procedures}")

    async def follow_until_idle(self, expect_turn: str | None) -> None:
        """Follow the transcript until the turn for ``expect_turn`` (the message text) has an outcome."""
        turn: int | None = None
        quiet_polls = 0
        while True:
            entries = await self.print_new()
            for entry in entries:
                if expect_turn is not None and entry.kind == "operator" and entry.text == expect_turn:
                    turn = entry.turn
            view = await inv.pending(self.client, self.session_id)
            if view is not None and (view.turn, view.code_hash) not in self.prompted:
                self.prompted.add((view.turn, view.code_hash))
                await self.review(view)
                continue
            done = turn is not None and any(e.turn == turn and e.kind in TERMINAL_KINDS for e in entries)
            if done or (expect_turn is None and view is None and not entries):
                quiet_polls += 1
                if done or quiet_polls >= 3:
                    return
            await asyncio.sleep(POLL_S)

    async def print_new(self) -> list[TranscriptEntry]:
        entries = await inv.transcript(self.client, self.session_id, self.seen)
        for entry in entries:
            self.seen = max(self.seen, entry.seq)
            print_entry(entry, self.verbose)
        return entries

    async def review(self, view: PendingView) -> None:
        show_pending(view)
        keys = "/".join(CHOICE_KEYS[c] for c in view.choices)
        while True:
            answer = (await asyncio.to_thread(_read_line, f"decision [{keys}]> ")).strip() or "n"
            if answer == "/quit":
                return
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
                await inv.decide_by_prefix(self.client, self.session_id, view.code_hash, kind, self.me, replacement)
            except inv.InvestigationError as exc:
                console.print(f"[red]{exc}[/]")
            return


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
    if entry.kind in QUIET_KINDS and not verbose:
        return
    if entry.kind == "code":
        console.print(f"[dim]strategy: {entry.data.get('strategy') or '-'}; tools: {entry.data.get('tools')}[/]")
        console.print(Syntax(entry.text, "python", line_numbers=False))
        return
    if entry.kind == "run":
        for call in entry.data.get("calls", []):
            reason = f" {call['reason']}" if call.get("reason") else ""
            console.print(f"[dim]  tool {escape(call['tool'])} → {call['outcome']} "
                          f"({call['bytes']} bytes){escape(reason)}[/]")
    style = {"reply": "bold", "refused_run": "red", "refused_decision": "red", "suggestion": "yellow",
             "hypothesis": "cyan", "grant": "magenta", "revoke": "magenta"}.get(entry.kind, "dim")
    who = f"{entry.actor}: " if entry.actor and entry.kind in ("decision", "refused_decision", "operator") else ""
    console.print(f"[{style}]{escape('[' + entry.kind + ']')}[/{style}] {escape(who + entry.text)}")


def show_pending(view: PendingView) -> None:
    flag = "[green]read-only[/]" if view.read_only else f"[red]STATE-CHANGING ({', '.join(view.state_changing)})[/]"
    console.print(Panel(
        Syntax(view.code, "python"),
        title=f"review turn {view.turn} · {short_hash(view.code_hash)} · {flag}",
        subtitle=escape(f"asked by {view.requester} · {view.detail}"),
    ))
    console.print(f"summary: {escape(view.summary)}")
    if view.trigger_signals:
        console.print(f"because: {escape('; '.join(view.trigger_signals))}")
    console.print("  ".join(f"{CHOICE_KEYS[c]} = {CHOICE_WORDS[c]}" for c in view.choices))


def show_approvals(view) -> None:
    table = Table("kind", "key", "policy / procedure", "by", "since")
    for hash_, policy in sorted(view.session_policies.items()):
        table.add_row("session", short_hash(hash_), policy.policy.value, policy.approved_by, "")
    for name, grant in sorted(view.grants.items()):
        table.add_row("durable", short_hash(grant.code_hash), name, grant.granted_by, grant.granted_at.isoformat())
    console.print(table if view.session_policies or view.grants else "no standing approvals")


# --------------------------------------------------------------------------------- approvals / approve
def approvals_cmd() -> None:
    """Pending reviews across all investigation sessions (found through Temporal's search attributes)."""
    settings = get_settings()

    async def go() -> None:
        client = await _connect(settings)
        found = await inv.list_pending(client)
        if not found:
            console.print("no investigation is waiting for approval")
            return
        table = Table("session", "turn", "hash", "asked by", "effect", "tools", "summary")
        for item in found:
            v = item.view
            effect = "read-only" if v.read_only else "STATE-CHANGING"
            table.add_row(item.session_id, str(v.turn), short_hash(v.code_hash), v.requester, effect,
                          ", ".join(v.tools), v.summary[:60])
        console.print(table)
        console.print("answer with: bamboo approve SESSION HASH_PREFIX y|a|k|n")

    run(go())


def approve_cmd(
    session: str = typer.Argument(..., help="session id (see `bamboo approvals`)"),
    hash_prefix: str = typer.Argument(..., help="at least 8 characters of the pending code hash"),
    decision: str = typer.Argument(..., help="y (run once), a (auto-run), k (always ask), n (reject)"),
    identity: str | None = typer.Option(None, "--as", help="who you are (default: $BAMBOO_OPERATOR or your login)"),
) -> None:
    """Answer a pending review from any terminal; the workflow re-checks turn, hash and approver rules."""
    settings = get_settings()
    me = identity or default_identity()
    try:
        kind = inv.parse_decision(decision)
    except inv.InvestigationError as exc:
        fail(str(exc))
    if kind is DecisionKind.EDIT:
        fail("edit needs the replacement code: attach with `bamboo investigate --attach SESSION` to edit")
    run(_approve(settings, session, hash_prefix, kind, me))


async def _approve(settings: Settings, session: str, hash_prefix: str, kind: DecisionKind, me: str) -> None:
    client = await _connect(settings)
    try:
        view = await inv.decide_by_prefix(client, session, hash_prefix, kind, me)
    except inv.InvestigationError as exc:
        fail(str(exc))
        return

    async def outcome():
        entries = await inv.transcript(client, session)
        return next((e for e in reversed(entries) if e.kind in ("decision", "refused_decision")
                     and e.turn == view.turn and e.actor == me), None)

    entry = await inv.wait_until(outcome, timeout_s=15)
    if entry is None:
        console.print("decision sent; no worker has applied it yet (it will be applied when one runs)")
    elif entry.kind == "refused_decision":
        fail(entry.text)
    else:
        console.print(f"{session} turn {view.turn} {short_hash(view.code_hash)}: {entry.text}")


# --------------------------------------------------------------------------------- demo
DEMO_REQUESTER = "demo-requester"


def demo_investigation(settings: Settings, task_id: int = 40112233) -> None:
    """Start a session on a sample task with a pending review, and tell the operator how to answer it."""

    async def go() -> tuple[str, PendingView | None]:
        client = await _connect(settings)
        session_id = f"demo-{uuid.uuid4().hex[:6]}"
        # Opened by a separate identity, so that the operator approving from another terminal is a second
        # person: state-changing (or unanalysable) code needs a distinct approver.
        await inv.start(client, inv.start_input(settings, session_id, DEMO_REQUESTER, task_id=task_id))
        await inv.send_message(client, session_id, "What do the scout jobs say about memory?", DEMO_REQUESTER,
                               force_tool=True)
        view = await inv.wait_until(lambda: inv.pending(client, session_id), timeout_s=120)
        return session_id, view

    session_id, view = run(go())
    ui = f"http://{settings.temporal_address.split(':')[0]}:{settings.temporal_ui_port}"
    lines = [f"Investigation [bold]{session_id}[/] is running on task {task_id} (opened as {DEMO_REQUESTER}; "
             f"you approve as {default_identity()})."]
    if view is not None:
        lines.append(f"Turn {view.turn} waits for review (code {short_hash(view.code_hash)}).")
        lines.append(f"  approve from another terminal:  bamboo approve {session_id} {view.code_hash[:12]} y")
        lines.append("  or with the Temporal CLI:        temporal workflow signal --workflow-id "
                     f"investigate:{session_id} --name decide --input "
                     f"'{{\"turn\": {view.turn}, \"code_hash\": \"{view.code_hash[:12]}\", \"kind\": \"run_once\", "
                     f"\"approver\": \"{default_identity()}\"}}'")
    else:
        lines.append("No review is pending yet (the model may still be working); `bamboo approvals` will show it.")
    lines.append(f"  attach:                          bamboo investigate --attach {session_id}")
    lines.append(f"  find it in Temporal Web:          {ui}/namespaces/{settings.temporal_namespace}/workflows"
                 "?query=BambooAwaitingApproval%3Dtrue")
    console.print(Panel("\n".join(lines), title="investigation"))
