"""The demo's investigation: the whole review loop, shown offline, with no model writing code.

``bamboo demo`` stores the reviewed code procedures bundled with the examples (``examples/procedures``), opens a
session on a bundled task as ``demo-requester`` and walks two turns. The first question is answered by reusing a
stored read-only procedure: proposed without a model call, shown for review, approved by the operator, run in
the sandbox, its result printed. The second reuses a state-changing one (a retry). Proposed from the store, not
written for this request, it first needs its requester's acceptance: the requester's own answer is taken as that
(never as an approval: the distinct-approver rule still holds), then the operator's approval runs it. The
session's audit rows close the tour. The session stays open for ``bamboo investigate --attach``.

PanDA is the simulator: when nothing answers at the configured API address on this machine, the demo serves the
bundled tasks there itself for as long as it runs (``bamboo panda-sim`` serves them for longer).
"""

from __future__ import annotations

import contextlib
import json
import socket
import uuid
from collections.abc import Iterator
from typing import NoReturn
from pathlib import Path
from urllib.parse import urlsplit

from rich.panel import Panel
from rich.table import Table

from bamboo.approvals.keys import LocalKey
from bamboo.cli.common import console, fail, run
from bamboo.cli.investigate_cmd import (
    DEMO_IDENTITIES_NOTICE, DEMO_REQUESTER, default_identity, provision_demo_identities, show_pending,
)
from bamboo.frontends.inert_text import inert_rich
from bamboo.investigation import client as inv
from bamboo.investigation.contract import PendingView, TranscriptEntry
from bamboo.settings import Settings
from bamboo.temporal_client import TemporalUnavailable, connect
from policy.code_identity import short_hash
from policy.decisions import DecisionKind
from policy.identity import canonical_identity

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PROCEDURES = ROOT / "examples" / "procedures"
EXAMPLE_INCIDENTS = ROOT / "examples" / "incidents"
# ex-021: stage-out failed at a storage endpoint. The task is finished, so PanDA accepts a retry of it.
DEMO_TASK = 40149035
DEMO_CAUSE = "Storage endpoint unavailable"
DEMO_QUESTIONS = ("What happened to this task and its jobs?", "The storage endpoint is back: retry the task.")
TURN_TIMEOUT_S = 300
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def demo_investigation(settings: Settings, task_id: int = DEMO_TASK, admin: LocalKey | None = None) -> None:
    """Walk one session through the review loop with the bundled procedures (module docstring)."""
    me = canonical_identity(default_identity())
    with _simulator(settings):
        session_id = run(_walk(settings, task_id, me, admin))
    ui = f"http://{settings.temporal_address.split(':')[0]}:{settings.temporal_ui_port}"
    console.print(Panel("\n".join([
        f"Investigation [bold]{session_id}[/] stays open on task {task_id} (opened as {DEMO_REQUESTER}; you approve "
        f"as {me}, with the key in {settings.resolved_keys_dir()}).",
        DEMO_IDENTITIES_NOTICE.format(requester=DEMO_REQUESTER, me=me),
        f"  ask more, or /new for newly written code:  bamboo investigate --attach {session_id}",
        "  pending reviews from any terminal:          bamboo approvals",
        f"  find it in Temporal Web:                    {ui}/namespaces/{settings.temporal_namespace}/workflows"
        "?query=BambooKind%3D%22investigate%22",
    ]), title="investigation"))


async def _walk(settings: Settings, task_id: int, me: str, admin: LocalKey | None) -> str:
    await provision_demo_identities(settings, me, admin)
    stored = await store_example_procedures(settings)
    console.print(f"Stored procedures from examples/procedures (reviewed code, with their incidents): "
                  f"{', '.join(stored)}")
    try:
        temporal = await connect(settings)
    except TemporalUnavailable as exc:
        fail(str(exc))
        raise
    client = inv.InvestigationClient(temporal)  # the operator API every front end uses
    requester, operator = inv.Speaker.of(settings, DEMO_REQUESTER), inv.Speaker.of(settings, me)
    session_id = f"demo-{uuid.uuid4().hex[:6]}"
    await client.start(inv.start_input(settings, session_id, DEMO_REQUESTER, task_id=task_id, cause=DEMO_CAUSE,
                                       startup_hypothesis=False))
    console.print(f"Session {session_id} on task {task_id}, opened by {DEMO_REQUESTER}; the cause an analysis "
                  f"chose for it: {DEMO_CAUSE}.")
    for turn, question in enumerate(DEMO_QUESTIONS, start=1):
        console.rule(f"turn {turn}")
        console.print(inert_rich(f"{DEMO_REQUESTER} asks: {question}"))
        seen = max((e.seq for e in await client.transcript(session_id)), default=0)
        try:
            await client.message(session_id, requester, question, force_tool=True)
        except inv.InvestigationError as exc:
            _stopped(settings, turn, f"the question was refused ({exc.refusal}): {exc}")
        view = await _review(client, session_id, turn, seen)
        if not isinstance(view, PendingView):
            _stopped(settings, turn, view)
        for line in await _turn_entries(client, session_id, turn, "reuse"):
            console.print(inert_rich(f"[reuse] {line.text}", "cyan"))
        show_pending(view)
        if not view.read_only:
            await _run_once(client, session_id, view, requester, "accepts")
        approved = max((e.seq for e in await client.transcript(session_id)), default=0)
        await _run_once(client, session_id, view, operator)
        await _show_run(client, session_id, turn, approved)
    await _show_audit(settings, session_id)
    return session_id


async def store_example_procedures(settings: Settings) -> list[str]:
    """The bundled reviewed code procedures, stored as approved (a capture per incident: loading again is a
    no-op); returns their names."""
    from bamboo.cli.store_access import opened_store
    from bamboo.investigation.bundled import load_bundled, store_bundled
    from bamboo.investigation.procedures import ProcedureRepository

    procedures = load_bundled(EXAMPLE_PROCEDURES, EXAMPLE_INCIDENTS)
    async with opened_store(settings) as store:
        await store_bundled(ProcedureRepository(store.pool), procedures)
    return [p.name for p in procedures]


def _stopped(settings: Settings, turn: int, why: str) -> NoReturn:
    """The demo's main job did not run to its end: one line saying where it stopped and where to look, exit 1
    (it once printed the reason and went on to "Where to look" with exit 0, a broken demo looking like a good one)."""
    fail(f"the demo's investigation stopped at turn {turn}: {why}; see the worker's log, "
         f"{settings.resolved_data_dir() / 'logs' / 'worker.log'}")


async def _review(client: inv.InvestigationClient, session_id: str, turn: int, seen: int) -> PendingView | str:
    """The turn's pending review, or what the session said instead (it answered without one, or refused the
    message: an entry after ``seen`` with no turn), or that it said nothing in time."""
    async def probe():
        view = await client.pending(session_id)
        if view is not None and view.turn == turn:
            return view
        said = [e for e in await client.transcript(session_id, seen)
                if (e.turn == turn and e.kind in ("reply", "notice", "refused_run", "system")) or e.kind == "refused_request"]
        return said[-1] if said else None

    found = await inv.wait_until(probe, timeout_s=TURN_TIMEOUT_S)
    if isinstance(found, PendingView):
        return found
    said = found.text if found is not None else f"nothing within {TURN_TIMEOUT_S} s (is the worker running?)"
    return f"nothing to review; the session says: {said}"


async def _run_once(client: inv.InvestigationClient, session_id: str, view: PendingView, speaker: inv.Speaker,
                    verb: str = "approves") -> None:
    """Answer the pending code with run once as ``speaker``, and print the session's verdict. ``verb`` "accepts":
    the requester's answer to a state-changing procedure the store proposed for their request, which the session
    takes as their acceptance of it (it runs nothing; someone else must still approve it) and says so."""
    try:
        delivery = await client.decide(session_id, speaker, view.turn, view.code_hash, DecisionKind.RUN_ONCE,
                                       review=view.review)
    except inv.InvestigationError as exc:
        console.print(inert_rich(f"{speaker.identity} {verb} {short_hash(view.code_hash)}: REFUSED "
                                 f"({exc.refusal}): {exc}", "red"))
        return
    outcome = delivery.detail if delivery.durable or verb == "accepts" else "accepted"
    console.print(inert_rich(f"{speaker.identity} {verb} {short_hash(view.code_hash)}: {outcome}", "green"))


async def _show_run(client: inv.InvestigationClient, session_id: str, turn: int, approved: int) -> None:
    """The run's outcome and result, then the model's reading of it (labelled as the model's), once the session
    said how the approval given after entry ``approved`` ended (the requester's acceptance is a notice before it)."""
    async def replied():
        return [e for e in await _turn_entries(client, session_id, turn, "reply", "notice", "refused_run")
                if e.seq > approved]

    await inv.wait_until(replied, timeout_s=TURN_TIMEOUT_S)
    for entry in await _turn_entries(client, session_id, turn, "run", "refused_run"):
        if entry.kind == "refused_run":
            console.print(inert_rich(f"[refused_run] {entry.text}", "red"))
            continue
        calls = ", ".join(f"{c['tool']} {c['outcome']}" for c in entry.data.get("calls", []))
        console.print(inert_rich(f"[run] in the sandbox ({entry.data.get('isolation') or 'sandbox'}), approved by "
                                 f"{entry.actor}: {entry.data.get('status')}; tool calls: {calls or 'none'}"))
        result = json.dumps(entry.data.get("return_value"), indent=2, sort_keys=True, ensure_ascii=True)
        console.print(inert_rich(f"result:\n{result}"))
        if entry.data.get("error"):
            console.print(inert_rich(f"error: {entry.data['error']}", "red"))
    for entry in await _turn_entries(client, session_id, turn, "reply", "notice"):
        if entry.kind == "notice":
            console.print(inert_rich(f"[notice] {entry.text}"))
        else:
            console.print(inert_rich(f"The model says (unverified): {entry.text}", "yellow"))


async def _show_audit(settings: Settings, session_id: str) -> None:
    """The session's audit rows: who asked, what the policy decided, who approved or was refused, what ran."""
    from bamboo.cli.store_access import opened_store

    async with opened_store(settings) as store:
        async def rows():
            async with store.pool.connection() as conn:
                found = await (await conn.execute(
                    "SELECT seq, kind, actor, body FROM audit WHERE run_id = %s ORDER BY seq",
                    (f"investigate:{session_id}",))).fetchall()
            return found if sum(1 for r in found if r[1] == "code_run") >= len(DEMO_QUESTIONS) else None

        found = await inv.wait_until(rows, timeout_s=60, every_s=1.0) or []
    console.rule("audit rows of the session (bamboo audit verify checks the chain)")
    table = Table("seq", "kind", "actor", "what")
    for column in table.columns:
        column.overflow = "fold"
    for seq, kind, actor, body in found:
        table.add_row(str(seq), kind, inert_rich(actor), inert_rich(_audit_summary(body)))
    console.print(table)


def _audit_summary(body: dict) -> str:
    keys = ("turn", "procedure", "outcome", "reason", "kind", "refusal", "status", "approver", "requester")
    parts = [f"{k}={body[k]}" for k in keys if body.get(k) not in (None, "", [])]
    if body.get("code_hash"):
        parts.append(f"code={short_hash(str(body['code_hash']))}")
    if body.get("accepted") is not None:
        parts.append(f"accepted={body['accepted']}")
    return " ".join(parts)


async def _turn_entries(client: inv.InvestigationClient, session_id: str, turn: int,
                        *kinds: str) -> list[TranscriptEntry]:
    return [e for e in await client.transcript(session_id) if e.turn == turn and e.kind in kinds]


@contextlib.contextmanager
def _simulator(settings: Settings) -> Iterator[None]:
    """The PanDA simulator at the configured API address while the demo runs, unless something answers there."""
    address = urlsplit(settings.panda_api_url)
    host, port = address.hostname or "", address.port or 80
    if host not in LOOPBACK or _listening(host, port):
        console.print(f"PanDA: {settings.panda_api_url}")
        yield
        return
    from bamboo.panda.simulator import PandaSimulator

    # The demo's second turn retries a bundled task another user owns, which PanDA allows a production role only.
    with PandaSimulator(EXAMPLE_INCIDENTS, host=host, port=port, require_token=None, production_role=True) as sim:
        console.print(f"PanDA: the simulator of the bundled tasks at {sim.api_url}, for as long as the demo runs "
                      "(`bamboo panda-sim --production-role` keeps one running)")
        yield


def _listening(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False
