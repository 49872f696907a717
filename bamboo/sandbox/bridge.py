"""Parent side of the tool bridge: every call a sandboxed script makes is decided here.

Per call, in order: the frame's token (constant-time compare; a wrong one ends the run), the run's
frame budget (every call frame counts, denied and replayed ones included; the first one past it ends
the run), the call id (strictly increasing, so a replayed frame is refused), the deadline, the tool name
resolved *now* against the run's allow-set (human-input tools are never bridged, whatever the allow-set
says; state-changing ones are refused when the sandbox is degraded), arguments that are valid Unicode,
not absurdly nested and valid against the tool's JSON schema, dispatch with a per-call timeout, the result
made plain JSON and then scrubbed of secrets (``bamboo.sandbox.results``, in a worker thread), size cap.
Every frame, allowed, denied or undecodable, is appended to the audit log, with anything the child sent
quoted so that the row itself can always be stored. A state-changing call is also audited before it is
made (``tool_call_started``), and is not made when that row cannot be written: nothing changes PanDA
without a row in the chain, whatever happens to the audit log during the call. A script only ever sees a
short error for a denial; the reason in full goes to the operator's audit row. A tool's own error reaches
the script cut to a few kilobytes, then scrubbed.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import hmac
import itertools
import json
import secrets
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from opentelemetry import trace

from bamboo.audit import AuditEvent, AuditSink
from bamboo.sandbox.models import BridgeLimits
from bamboo.sandbox.contract import CallOutcome, CallRecord
from bamboo.sandbox.protocol import PREVIEW_CHARS, REASON_CHARS, safe_text, scrubbed_reason, value_problem
from bamboo.tools.arguments import ArgumentError, UnusableSchema, validate_arguments
from bamboo.tools.model import ToolCaller, ToolSpec
from bamboo.metrics import METRICS
from bamboo.sandbox.results import prepare
from policy.scrub import ScrubResult, find_secrets, redact, scrub_text, scrub_value

_tracer = trace.get_tracer("bamboo.sandbox")
TOKEN_BYTES = 32  # 256 bits
MAX_REASON_CHARS = REASON_CHARS
MAX_TOOL_NAME_CHARS = 100
# What a script is told of a tool's error: enough to see what went wrong, never the whole of it. A tool
# decides how long its error is (an MCP server's error joins every text block it sent): 20 MB of error
# text once held the worker's loop for 6 s while it was scrubbed, then went whole into the child's pipe.
# So the text is cut first and only what is kept is scrubbed, which bounds the scrubbing as well.
MAX_TOOL_ERROR_CHARS = 4096
# How far past the cut the scrubber reads, so that a secret straddling the cut is seen whole and dropped
# whole, not cut into a head that no longer looks like a secret. Secrets are shorter than this (a
# PEM-armoured RSA-4096 private key is about 3.3 KB).
TOOL_ERROR_SCAN_MARGIN = 4096
UNDECODABLE = "<undecodable frame>"
T = TypeVar("T")


def new_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


def args_digest(arguments: Any) -> str:
    try:
        canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    except (ValueError, RecursionError, TypeError):
        canonical = repr(arguments)
    # surrogatepass: a lone surrogate still hashes (to the bytes the child sent) instead of raising
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


# What of the arguments the preview scrubs: a frame may carry a megabyte, of which the preview shows 200
# characters; scrubbing all of it cost a quarter of a second of the worker's CPU (and its event loop, through the
# GIL) per call, even a denied one. Strings are cut to PREVIEW_SCRUBBED times the preview, so a secret that
# starts inside the preview is still whole when scrubbed, and at most PREVIEW_NODES values are kept.
PREVIEW_SCRUBBED, PREVIEW_NODES = 4, 256


def preview_copy(value: Any, chars: int, nodes: int = PREVIEW_NODES) -> Any:
    """A copy of ``value`` no preview of ``chars`` characters can tell from it: strings cut to ``chars``, and only
    the first ``nodes`` values, in the order JSON writes them (a walkable value: value_problem found nothing)."""
    left = nodes

    def copy(v: Any) -> Any:
        nonlocal left
        left -= 1
        if left < 0:
            return "…"
        if isinstance(v, str):
            return v[:chars]
        if isinstance(v, dict):
            return {(k[:chars] if isinstance(k, str) else k): copy(x)
                    for k, x in itertools.islice(v.items(), max(left, 0) + 1)}
        if isinstance(v, (list, tuple)):
            return [copy(x) for x in itertools.islice(v, max(left, 0) + 1)]
        return v

    return copy(value)


def args_preview(arguments: Any, limit: int = PREVIEW_CHARS) -> str:
    """The arguments as compact JSON for the operator, scrubbed, cut to about ``limit`` characters."""
    if value_problem(arguments) is None:
        scrubbed, _ = scrub_value(preview_copy(arguments, limit * PREVIEW_SCRUBBED))
        try:
            text = json.dumps(scrubbed, separators=(",", ":"), ensure_ascii=False, default=str)
        except (ValueError, TypeError):
            text = repr(scrubbed)
    else:  # not safely walkable: quote it as text, scrub the text
        try:
            text = json.dumps(arguments, separators=(",", ":"), ensure_ascii=True, default=str)
        except (ValueError, RecursionError, TypeError):
            text = repr(type(arguments).__name__)
        text = scrub_text(text[: limit * PREVIEW_SCRUBBED]).text
    # Cut here, without a count: the text is of a shortened copy, so its length is not the arguments'.
    return safe_text(text) if len(text) <= limit else safe_text(text[:limit]) + "…"


def result_shape(data: Any) -> str:
    """A one-line shape of a tool result for verbose narration: ``dict(status, jobs)``, ``list[12]``…"""
    if data is None:
        return "none"
    if isinstance(data, dict):
        keys = [safe_text(str(k), 40) for k in list(data)[:8]]
        more = ", …" if len(data) > 8 else ""
        return f"dict({', '.join(keys)}{more})"
    if isinstance(data, list):
        return f"list[{len(data)}]"
    if isinstance(data, str):
        return f"str({len(data)} chars)"
    return type(data).__name__


def bridgeable(specs: Sequence[ToolSpec], allowed: frozenset[str]) -> list[ToolSpec]:
    """The tools a run may call: in the allow-set, known, and not waiting on a human."""
    return [s for s in specs if s.name in allowed and not s.requires_interaction]


@dataclass
class _Decision:
    outcome: CallOutcome
    reply: dict[str, Any]
    reason: str | None = None
    size: int = 0
    redactions: int = 0
    shape: str = "none"


class ToolBridge:
    """One run's gate to the tools. Create one per run; it is useless after the run ends."""

    def __init__(
        self,
        *,
        run_id: str,
        caller: ToolCaller,
        specs: Sequence[ToolSpec],
        allowed: frozenset[str],
        audit: AuditSink,
        actor: str = "sandbox",
        limits: BridgeLimits | None = None,
        token: str | None = None,
        refuse_state_changing: bool = False,
        python_names: Mapping[str, str] | None = None,
    ) -> None:
        self.run_id = run_id
        # Python name -> tool, as the run's review mapped them (None: computed over this run's catalogue).
        self.python_names = dict(python_names) if python_names is not None else None
        self.actor = actor
        self.token = token or new_token()
        self.limits = limits or BridgeLimits()
        self._caller = caller
        self._specs = {s.name: s for s in specs}
        self._allowed = frozenset(allowed)
        self._audit = audit
        self._deadline: float | None = None
        self._last_call_id = 0
        self._frames = 0
        self._refuse_state_changing = refuse_state_changing
        self._closed_reason: str | None = None
        self._slots = asyncio.Semaphore(self.limits.max_concurrent_calls)
        self._owed: dict[int, dict[str, Any]] = {}  # frames counted but not yet being served (ordinal → frame)
        self._serving: set[asyncio.Task[Any]] = set()  # tasks inside handle_call (each writes its row)
        self.audit_lost = asyncio.Event()
        self.calls: list[CallRecord] = []

    # -- what the child is told --------------------------------------------------------------
    @property
    def bridged_specs(self) -> list[ToolSpec]:
        specs = bridgeable(list(self._specs.values()), self._allowed)
        return [s for s in specs if s.read_only] if self._refuse_state_changing else specs

    @property
    def catalogue_names(self) -> list[str]:
        """Every tool the run's catalogue holds: the stub's Python names are computed over all of them, as
        the trust policy's scan computes them, so both map ``tools.x`` to the same tool."""
        return sorted(self._specs)

    def set_deadline(self, monotonic_deadline: float) -> None:
        self._deadline = monotonic_deadline

    def close(self, reason: str) -> None:
        """Refuse every later call (the run ended, or the child broke protocol)."""
        if self._closed_reason is None:
            self._closed_reason = reason

    def token_matches(self, frame: dict[str, Any]) -> bool:
        presented = frame.get("token")
        if not isinstance(presented, str):
            return False
        return hmac.compare_digest(presented.encode("utf-8", "replace"), self.token.encode("ascii"))

    # -- the gate ----------------------------------------------------------------------------
    def screen(self, frame: dict[str, Any]) -> tuple[int, str | None]:
        """Count a call frame as it arrives; a reason to stop the run (wrong token, budget spent) or None.

        The runner calls this before it hands the frame to ``handle_call``, so it stops reading from a
        child that forged a token or keeps calling past its budget instead of serving it concurrently.
        From here on the frame is owed a row: ``handle_call`` writes it, or ``settle`` does when the run
        ended before the frame was served.
        """
        self._frames += 1
        self._owed[self._frames] = frame
        if not self.token_matches(frame):
            return self._frames, "bad_token"
        if self._frames > self.limits.max_calls:
            return self._frames, "max_calls"
        return self._frames, None

    @property
    def frames(self) -> int:
        return self._frames

    @property
    def audit_failed(self) -> bool:
        """An audit write failed: the bridge is closed and the run must stop and say so."""
        return self.audit_lost.is_set()

    async def handle_call(self, frame: dict[str, Any], ordinal: int | None = None) -> dict[str, Any]:
        """Decide, dispatch and audit one ``call`` frame; returns the reply frame for the child.

        The row is written before the reply is returned, and it is written even when the caller is
        cancelled (the run ended): the cancellation is re-raised once the row is in."""
        if ordinal is None:
            self._frames += 1
            ordinal = self._frames
        self._owed.pop(ordinal, None)
        task = asyncio.current_task()
        if task is not None:
            self._serving.add(task)
        try:
            return await self._handle(frame, ordinal)
        finally:
            if task is not None:
                self._serving.discard(task)

    async def _handle(self, frame: dict[str, Any], ordinal: int) -> dict[str, Any]:
        started = time.monotonic()
        call_id = frame.get("id")
        raw_tool = frame.get("tool")
        arguments = frame.get("args")
        facts = asyncio.ensure_future(asyncio.to_thread(_frame_facts, frame))  # sized by the frame: off the loop
        decision = self._admit(frame, call_id, raw_tool, ordinal)  # before any await: call ids stay in order
        dispatched = cut = False
        name = cast(str, raw_tool)  # read only once _admit found a tool of the run's by this name
        try:
            if decision is None:
                decision = await asyncio.to_thread(_validate, name, self._specs[name], arguments, call_id)
            if decision is None:  # _validate found a JSON object
                async with self._slots:
                    if not self._specs[name].read_only and not await self._announce(ordinal, facts):
                        decision = _denied(call_id, "the audit log is unavailable; the call was not made",
                                           "audit_unavailable")
                    else:
                        dispatched = True
                        decision = await self._dispatch(name, cast(dict[str, Any], arguments))
        except asyncio.CancelledError:
            cut = True
            if dispatched:  # the tool may have acted, so the row says so
                decision = _failed("the run ended while the call was in flight", "cancelled_in_flight")
            else:
                decision = _denied(call_id, "the run ended before the call was served", "cut_off")
        (tool, digest, preview), late = await _despite_cancellation(facts)
        written, later = await _despite_cancellation(self._record(ordinal, tool, digest, preview, decision, started))
        if cut or late or later:
            raise asyncio.CancelledError()
        if not written:
            return _error(call_id, "the audit log is unavailable; no further tool calls in this run", denied=True)
        reply = dict(decision.reply)
        reply["id"] = call_id if isinstance(call_id, int) else None
        return reply

    async def settle(self) -> None:
        """Once the run has ended: wait for the calls still writing their rows, then write one for every
        frame that was read but never served (cut off by the end of the run, a forged frame or the budget)."""
        while self._serving:
            await asyncio.wait(list(self._serving))
        while self._owed:
            ordinal = min(self._owed)
            frame = self._owed.pop(ordinal)
            started = time.monotonic()
            tool, digest, preview = await asyncio.to_thread(_frame_facts, frame)
            cut = _denied(frame.get("id"), "the run ended before the call was served", "cut_off")
            await self._record(ordinal, tool, digest, preview, cut, started)

    async def reject_frame(self, reason: str, detail: str, preview: str) -> None:
        """Audit a frame that is not a call the bridge can judge (undecodable, forged ``done``, unknown type)."""
        self._frames += 1
        self.close(detail)
        await _despite_cancellation(self._record(
            self._frames, UNDECODABLE if reason == "malformed_frame" else "<frame>", args_digest(preview),
            safe_text(preview, PREVIEW_CHARS), _Decision("denied", {}, f"{reason}: {detail}"), time.monotonic()))

    async def accept_done(self, frame: dict[str, Any]) -> bool:
        """Audit the run's ``done`` frame (its token already checked) before the runner takes its result;
        False when the audit failed, and then the result is refused. The row is written to its end even if
        the run is being torn down meanwhile, and the answer says whether it was: the runner's reading
        stops right after it either way."""
        event = AuditEvent(kind="sandbox_frame", run_id=self.run_id, actor=self.actor, body={
            "frame": "done", "outcome": "accepted", "ok": frame.get("ok") is True, "calls": self._frames,
            "via": "sandbox"})
        written, _ = await _despite_cancellation(self._append(event))
        return written

    async def _record(self, ordinal: int, tool: str, digest: str, preview: str, decision: _Decision,
                      started: float) -> bool:
        """Add to the call log (in frame order: ``seq`` is the frame's ordinal) and append to the audit; False
        (and the bridge closed) when the audit failed."""
        METRICS.tool_call(tool, decision.outcome, "sandbox")
        # A reason may quote what the child sent (a tool name of any length) or what a tool raised.
        reason = scrubbed_reason(decision.reason, MAX_REASON_CHARS) if decision.reason else None
        record = CallRecord(
            seq=ordinal,
            tool=tool,
            args_sha256=digest,
            args_preview=preview,
            result_shape=decision.shape,
            outcome=decision.outcome,
            reason=reason,
            bytes=decision.size,
            duration_ms=round((time.monotonic() - started) * 1000.0, 3),
            redactions=decision.redactions,
        )
        bisect.insort(self.calls, record, key=lambda r: r.seq)
        return await self._append(
            AuditEvent(
                kind="tool_call",
                run_id=self.run_id,
                actor=self.actor,
                body={
                    "tool": tool,
                    "args_sha256": digest,
                    "args_preview": preview,
                    "outcome": decision.outcome,
                    "bytes": decision.size,
                    "duration_ms": record.duration_ms,
                    "reason": reason,
                    "via": "sandbox",
                },
            )
        )

    async def _announce(self, ordinal: int, facts: asyncio.Future[tuple[str, str, str]]) -> bool:
        """Audit a state-changing call before it is made; False (and the bridge closed) when that failed.

        Its result row is written after the call, so an audit that failed in between left a change to PanDA
        with no row in the chain. A read needs no such row: when its row cannot be written the reply is an
        error, and the data never reaches the code."""
        tool, digest, preview = await facts  # what the call's result row names too
        return await self._append(AuditEvent(kind="tool_call_started", run_id=self.run_id, actor=self.actor, body={
            "tool": tool, "seq": ordinal, "args_sha256": digest, "args_preview": preview, "via": "sandbox"}))

    async def _append(self, event: AuditEvent) -> bool:
        try:
            await self._audit.append(event)
        except Exception as exc:  # noqa: BLE001 — an unaudited bridge must not keep serving: it closes, the run stops
            self.close(f"audit append failed: {type(exc).__name__}")
            self.audit_lost.set()
            return False
        return True

    def _admit(self, frame: dict[str, Any], call_id: Any, tool: Any, ordinal: int) -> _Decision | None:
        """The checks that depend on the run's state, in arrival order and cheap; the ones sized by the
        arguments are ``_validate``'s, in a worker thread."""
        if not self.token_matches(frame):
            self.close("a frame carried a wrong token")
            return _denied(call_id, "invalid bridge token", "bad_token")
        if ordinal > self.limits.max_calls:
            self.close("the run's call budget is spent")
            return _denied(call_id, f"this run may make at most {self.limits.max_calls} tool calls", "max_calls")
        if not isinstance(call_id, int) or isinstance(call_id, bool) or call_id <= self._last_call_id:
            return _denied(call_id, "call id is not fresh (replayed or out of order)", "replayed_frame")
        self._last_call_id = call_id
        if self._closed_reason is not None:
            return _denied(call_id, f"the bridge is closed: {self._closed_reason}", "bridge_closed")
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return _denied(call_id, "the run's deadline has passed", "deadline_passed")
        if not isinstance(tool, str) or value_problem(tool) is not None:
            return _denied(call_id, "the tool name must be a valid Unicode string", "invalid_tool_name")
        spec = self._specs.get(tool)
        if tool not in self._allowed or spec is None:
            allowed = ", ".join(sorted(s.name for s in self.bridged_specs)) or "none"
            return _denied(call_id, f"tool {tool!r} is not allowed in this run (allowed: {allowed})", "not_allowed")
        if spec.requires_interaction:
            return _denied(call_id, f"tool {tool!r} needs a human and is never callable from code", "requires_interaction")
        if self._refuse_state_changing and not spec.read_only:
            return _denied(call_id, f"tool {tool!r} changes state, which a degraded sandbox (no bwrap) refuses",
                           "degraded_isolation")
        return None

    async def _dispatch(self, tool: str, arguments: dict[str, Any]) -> _Decision:
        """One allowed call, traced with its tool name, outcome and reason; the reason scrubbed as the audit row's
        is (an exception's text went raw into the span, and on to the collector or the console span file)."""
        with _tracer.start_as_current_span("sandbox.tool_call") as span:
            span.set_attribute("tool.name", tool)
            span.set_attribute("sandbox.run_id", self.run_id)
            decision = await self._call(tool, arguments)
            span.set_attribute("tool.outcome", decision.outcome)
            if decision.reason:
                span.set_attribute("tool.reason", scrubbed_reason(decision.reason, MAX_REASON_CHARS))
        return decision

    async def _call(self, tool: str, arguments: dict[str, Any]) -> _Decision:
        timeout = self.limits.call_timeout_s
        if self._deadline is not None:
            timeout = min(timeout, max(0.0, self._deadline - time.monotonic()))
        try:
            result = await asyncio.wait_for(self._caller.call_tool(tool, arguments), timeout=timeout)
        except asyncio.TimeoutError:
            return _failed(f"tool {tool!r} did not answer within {timeout:.1f} s", "timeout")
        except Exception as exc:
            return _failed(f"tool {tool!r} failed: {type(exc).__name__}", f"exception: {exc}")
        if not result.ok:
            error = _scrubbed_error(result.error)  # reads a few KB whatever the tool sent: cheap enough inline
            reply = {"type": "result", "ok": False, "error": f"{tool}: {error.text}"}
            return _Decision("error", reply, "tool_error", redactions=len(error.findings))
        # Plain JSON first, then the scrubber (results.py says why); sized by the result, so off the loop.
        prepared = await asyncio.to_thread(prepare, result.data, self.limits.max_result_bytes)
        if prepared.problem is not None:
            return _failed(f"tool {tool!r} returned data the sandbox cannot carry: {prepared.problem}",
                           "unserialisable_result")
        if prepared.too_large:
            return _Decision(
                "error",
                {"type": "result", "ok": False, "error": f"result of {tool!r} is {'over ' if prepared.at_least else ''}"
                                                         f"{prepared.size} bytes, over the {self.limits.max_result_bytes}-byte cap"},
                "result_too_large",
                size=prepared.size,
                redactions=prepared.redactions,
            )
        data = prepared.data
        reply = {"type": "result", "ok": True, "data": data, "no_data": result.no_data}
        return _Decision("allowed", reply, None, prepared.size, prepared.redactions, result_shape(data))


def _frame_facts(frame: dict[str, Any]) -> tuple[str, str, str]:
    """What a call frame's row names: the tool as text, the arguments' digest and their scrubbed preview."""
    raw_tool = frame.get("tool")
    text = raw_tool if isinstance(raw_tool, str) else repr(raw_tool)[: MAX_TOOL_NAME_CHARS * 4]
    arguments = frame.get("args")
    return safe_text(text, MAX_TOOL_NAME_CHARS), args_digest(arguments), args_preview(arguments)


def _validate(tool: str, spec: ToolSpec, arguments: Any, call_id: Any) -> _Decision | None:
    """The arguments' checks (valid Unicode, nesting, the tool's schema): sized by the frame, so the bridge
    runs them in a worker thread."""
    if not isinstance(arguments, dict):
        return _denied(call_id, "arguments must be a JSON object", "invalid_arguments")
    problem = value_problem(arguments)
    if problem is not None:
        return _denied(call_id, f"arguments for {tool!r} are refused: {problem}", "invalid_arguments")
    try:
        validate_arguments(tool, spec.input_schema, arguments)
    except UnusableSchema as exc:
        return _denied(call_id, f"tool {tool!r}: {safe_text(str(exc), MAX_REASON_CHARS)}", "invalid_schema")
    except ArgumentError as exc:
        return _denied(call_id, safe_text(str(exc), MAX_REASON_CHARS), "invalid_arguments")
    return None


async def _despite_cancellation(work: Awaitable[T]) -> tuple[T, bool]:
    """Await ``work`` to its end even when the caller is cancelled meanwhile; (its result, whether a
    cancellation arrived). For audit rows: a run's teardown cancels the calls in flight, and a row cut
    off half-way was a tool call with no row."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            return await asyncio.shield(task), cancelled
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
            if task.done():
                return task.result(), cancelled


def _scrubbed_error(error: Any) -> ScrubResult:
    """A tool's error message as text, scrubbed (it may quote the tool's input or its credentials) and shown up
    to `MAX_TOOL_ERROR_CHARS` of it, a cut marked with how much more there was.

    Only `TOOL_ERROR_SCAN_MARGIN` past the cut is read, so the work is bounded whatever the tool sent. A
    secret starting before the cut is shorter than the margin, so it was read whole: the cut is moved before
    it if it would split it, never inside it, and nothing past the cut is shown (a secret cut where the reading
    stopped is never judged by its head alone). A structure is judged as a whole (a field named as a password
    makes its value secret), so of an error not read whole nothing from its first bracket on is shown."""
    text = error if isinstance(error, str) and error else "tool reported an error"
    read = text[: MAX_TOOL_ERROR_CHARS + TOOL_ERROR_SCAN_MARGIN]
    window = safe_text(read)
    findings = find_secrets(window)
    cut = min(MAX_TOOL_ERROR_CHARS, len(window))
    if len(read) < len(text):
        # What marks a value as secret can lie past the window (a JSON object's "name": "DB_PASSWORD" 9 KB after
        # its "value"): of a text not read whole, nothing from its first bracket on is shown.
        cut = min([cut, *(i for i in (window.find(c) for c in "{[<") if i >= 0)])
    for f in findings:
        if f.start < cut < f.end:
            cut = f.start
    kept = [f for f in findings if f.end <= cut]
    more = len(window) - cut + len(text) - len(read)
    return ScrubResult(redact(window[:cut], kept) + (f"…[{more} more characters]" if more else ""), tuple(kept))


def _denied(call_id: Any, message: str, reason: str) -> _Decision:
    return _Decision("denied", _error(call_id, message, denied=True), reason)


def _failed(message: str, reason: str) -> _Decision:
    return _Decision("error", {"type": "result", "ok": False, "error": message}, reason)


def _error(call_id: Any, message: str, *, denied: bool) -> dict[str, Any]:
    return {"type": "result", "id": call_id, "ok": False, "denied": denied, "error": message}
