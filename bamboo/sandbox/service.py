"""Execute generated code: one bridge per run, one child per run, scrubbed output, full transcript in a blob.

This is the service the ``execute_code`` activity calls. It owns no policy decisions: the caller
passes the allow-set (the trust policy decided it); this layer enforces it through the bridge. Two
refusals are its own, because they depend on how strong the sandbox is: a degraded sandbox (no bwrap)
runs neither unattended (automatic-phase) code nor any run whose allow-set holds a state-changing tool.

Whatever the child sent, ``execute`` returns a report and never raises for it: a return value that
cannot be carried (a lone surrogate, absurd nesting, an undecodable frame) is the script's error,
reported once, so Temporal has nothing to retry. The report stays small — previews, a capped call log
(the whole log goes to a blob), bounded error text — far under Temporal's payload limit.

Nothing sized by what the script sent runs on the event loop (the worker's loop belongs to Temporal): a return
value far over its cap is refused by the size of the done frame, before it is walked; the checks of the rest
(a walk, one encoding bounded by the cap) run in the offload pool; the transcript blob (two captures of up to
``capture_bytes``, six times that once control characters are escaped) is encoded there a chunk at a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from bamboo.audit import AuditSink, BlobSink
from bamboo.metrics import METRICS
from bamboo.output_scrub import scrub_output, scrub_returned
from bamboo.sandbox.bridge import ToolBridge
from bamboo.sandbox.errors import SandboxRefused
from bamboo.sandbox.models import BridgeLimits
from bamboo.sandbox.leftovers import COUNT_MAX_OWNED, MAX_DEPTH
from bamboo.sandbox.contract import CallRecord, Phase, SandboxRunResult, StreamCapture
from bamboo.sandbox.output import CappedStream, preview
from bamboo.sandbox.protocol import FRAME_SIZE, FrameSize, safe_text, value_problem
from bamboo.sandbox.runner import ChildOutcome, SandboxRunner
from bamboo.tools.model import ToolCaller, ToolOrigin, ToolSpec
from bamboo.offload import BudgetExceeded, in_thread
from policy.code_identity import normalize_code
from policy.scrub import scrub_text

log = logging.getLogger(__name__)

REPORT_CALLS = 100  # call records kept in the report itself; all of them go to the calls blob
MAX_ERROR_CHARS = 8000
MAX_REPORT_BYTES = 1024 * 1024  # Temporal refuses payloads over 2 MiB
# Normalising a 64 KB block with a docstring takes ~40 ms; only a stuck worker takes this long.
NORMALIZE_BUDGET_S = 30.0
# What a done frame holds besides its value (type, token, ok): a frame whose value must be over the return cap even
# without this much is refused by its size, unwalked.
FRAME_ENVELOPE_BYTES = 4096
# Checking a return value no larger than the frame's size allows (tens of milliseconds) and encoding the
# transcript blob (two 4 MiB captures of control characters: 0.1-0.2 s); only a stuck worker takes this long.
VALUE_CHECK_BUDGET_S = 30.0
TRANSCRIPT_BUDGET_S = 60.0
# Characters of a capture encoded per step: each step is one short C call (a few milliseconds at most), and the
# offload thread hands the GIL back to the event loop between steps; the whole transcript in one call held it for
# 0.2-0.4 s.
TRANSCRIPT_CHUNK_CHARS = 64 * 1024

_SIGNALS = {9: "SIGKILL (memory, process or output limit, or the run was stopped)", 24: "SIGXCPU (CPU time limit)",
            25: "SIGXFSZ (file size limit)", 11: "SIGSEGV", 6: "SIGABRT"}


class CodeExecutor:
    """Runs a script in the sandbox with a run-scoped tool bridge."""

    def __init__(
        self,
        *,
        runner: SandboxRunner,
        caller: ToolCaller,
        audit: AuditSink,
        blobs: BlobSink,
        specs: Sequence[ToolSpec] | None = None,
    ) -> None:
        self.runner = runner
        self.caller = caller
        self._fixed_specs = list(specs) if specs is not None else None
        self.audit = audit
        self.blobs = blobs

    def current_specs(self) -> list[ToolSpec]:
        """The catalogue for a new run: the fixed list if one was given, else the caller's live listing."""
        return list(self._fixed_specs) if self._fixed_specs is not None else list(self.caller.list_tools())

    async def execute(
        self,
        *,
        run_id: str,
        code: str,
        allowed_tools: frozenset[str],
        timeout_s: float = 30.0,
        actor: str = "sandbox",
        bridge_limits: BridgeLimits | None = None,
        phase: Phase = "automatic",
        caller: ToolCaller | None = None,
        read_only_tools: frozenset[str] = frozenset(),
        tool_names: Mapping[str, str] | None = None,
    ) -> SandboxRunResult:
        """``caller``: this run's own (one that holds the run to what was approved), else the executor's.
        ``read_only_tools``: the tools its decision judged read-only (in an automatic phase, every allowed one).
        ``tool_names``: Python name -> tool as its review mapped them (stubs.generate_stub_module)."""
        specs = self.current_specs()
        self._refuse_changed_routes(run_id, allowed_tools if phase == "automatic" else read_only_tools, specs)
        degraded = self.runner.isolation == "degraded"
        if degraded:
            self._refuse_in_degraded_mode(run_id, phase, allowed_tools, specs)
        bridge = ToolBridge(
            run_id=run_id,
            caller=caller or self.caller,
            specs=specs,
            allowed=allowed_tools,
            audit=self.audit,
            actor=actor,
            limits=bridge_limits,
            refuse_state_changing=degraded,
            python_names=tool_names,
        )
        # What runs is exactly the text its hash names: the hash ignores blanks ending a line and the line-ending
        # style, and a script can read its own text (its frames reach the runner's copy), so two blocks of one
        # hash that differ there must not behave differently. Off the loop: a docstring makes it a tokenize.
        runnable = await in_thread(normalize_code, code, budget_s=NORMALIZE_BUDGET_S, what="normalising the code")
        outcome = await self.runner.run(runnable, bridge, timeout_s=timeout_s)
        try:
            result = await self._report(run_id, outcome, bridge, timeout_s)
            METRICS.sandbox_run(result.status, result.isolation)
            return result
        except (ValueError, TypeError, RecursionError, UnicodeError) as exc:
            METRICS.sandbox_run("error", outcome.isolation)
            # Whatever the child produced, it is the script's error, reported once — never a retry.
            log.warning("sandbox run %s: its output could not be reported (%s)", run_id, type(exc).__name__)
            return SandboxRunResult(
                run_id=run_id, status="error", isolation=outcome.isolation, warnings=list(outcome.warnings),
                error=f"the script produced output that cannot be reported ({type(exc).__name__})",
                calls_total=len(bridge.calls), memory_guard=outcome.memory_guard, exit_code=outcome.exit_code,
                duration_ms=round(outcome.duration_ms, 3), warm_start=outcome.warm_start,
            )

    @staticmethod
    def _refuse_changed_routes(run_id: str, judged_read_only: frozenset[str], specs: Sequence[ToolSpec]) -> None:
        """A tool judged read-only when the run was decided must still be read-only now: the review and the run
        can see different catalogues (another worker's, an external server that has since dropped and whose name
        another server offers). Stored procedures are held to their reviewed bodies instead (procedure hashes)."""
        changed = sorted(s.name for s in specs if s.name in judged_read_only and not s.read_only
                         and s.origin is not ToolOrigin.PROCEDURE)
        if changed:
            raise SandboxRefused(
                f"run {run_id} was decided with {', '.join(changed)} read-only, and here it may change state (another "
                "server answers for it now); ask for the code to be reviewed again")

    @staticmethod
    def _refuse_in_degraded_mode(run_id: str, phase: Phase, allowed: frozenset[str], specs: Sequence[ToolSpec]) -> None:
        if phase == "automatic":
            raise SandboxRefused(
                f"run {run_id} is unattended (automatic phase) and the sandbox is degraded (no bwrap), which runs "
                "only code a human approved; install bubblewrap to run it")
        changing = sorted(s.name for s in specs if s.name in allowed and not s.read_only)
        if changing:
            raise SandboxRefused(
                f"run {run_id} may call state-changing tools ({', '.join(changing)}) and the sandbox is degraded "
                "(no bwrap), which refuses them; install bubblewrap to run it")

    async def _report(self, run_id: str, outcome: ChildOutcome, bridge: ToolBridge, timeout_s: float) -> SandboxRunResult:
        # Off the event loop: a script decides how much it prints and how costly it is to scrub.
        (out_text, out_hits), (err_text, err_hits) = await asyncio.gather(
            scrub_output(outcome.stdout.text()), scrub_output(outcome.stderr.text()))
        status, value, error = await self._interpret(outcome, timeout_s, bridge)
        if value is not None:
            value, _ = await scrub_returned(value)
        if error is not None:
            error = safe_text(scrub_text(error).text, MAX_ERROR_CHARS)
        transcript = {
            "run_id": run_id,
            "stdout": out_text,
            "stderr": err_text,
            "stdout_bytes": outcome.stdout.total,
            "stderr_bytes": outcome.stderr.total,
            "return_value": value,
            "error": error,
        }
        ref = None
        warnings = list(outcome.warnings)
        if out_text or err_text or error:
            try:
                blob = await in_thread(transcript_blob, transcript, budget_s=TRANSCRIPT_BUDGET_S,
                                       what="encoding the run's transcript")
            except BudgetExceeded as exc:  # the worker is stuck: the run's result stands, without its full transcript
                log.warning("sandbox run %s: its transcript was not stored: %s", run_id, exc)
                warnings.append(f"the full transcript was not stored: {exc}")
            else:  # the sink hashes it on the loop: hashlib, ~35 ms for the largest transcript (2 x 24 MB of escapes)
                ref = await self.blobs.put(blob)
        if outcome.isolation == "degraded":
            log.warning("sandbox run %s ran DEGRADED (no bwrap namespaces)", run_id)
        calls, calls_ref = await self._call_log(bridge.calls)
        result = SandboxRunResult(
            run_id=run_id,
            status=status,
            isolation=outcome.isolation,
            warnings=warnings,
            return_value=value,
            error=error,
            stdout=self._capture(out_text, outcome.stdout, out_hits),
            stderr=self._capture(err_text, outcome.stderr, err_hits),
            full_output_ref=ref,
            calls=calls,
            calls_total=len(bridge.calls),
            calls_ref=calls_ref,
            memory_guard=outcome.memory_guard,
            exit_code=outcome.exit_code,
            duration_ms=round(outcome.duration_ms, 3),
            warm_start=outcome.warm_start,
        )
        if len(result.model_dump_json().encode("utf-8")) > MAX_REPORT_BYTES:
            # Only a huge return value can get here (everything else is capped); it is in the transcript blob.
            result = result.model_copy(update={
                "return_value": None, "status": "error",
                "error": "the run report would exceed its size cap; the full transcript is in the blob"})
        return result

    async def _call_log(self, records: list[CallRecord]) -> tuple[list[CallRecord], str | None]:
        """The first ``REPORT_CALLS`` records for the report; all of them parked in a blob when cut."""
        if len(records) <= REPORT_CALLS:
            return list(records), None
        full = json.dumps([r.model_dump() for r in records], ensure_ascii=False).encode("utf-8")
        return list(records[:REPORT_CALLS]), await self.blobs.put(full)

    def _capture(self, text: str, stream: CappedStream, hits: int) -> StreamCapture:
        shown, cut = preview(text, self.runner.output.preview_bytes)
        return StreamCapture(preview=shown, total_bytes=stream.total, truncated=cut or stream.overflowed, redactions=hits)

    async def _interpret(self, outcome: ChildOutcome, timeout_s: float,
                         bridge: ToolBridge) -> tuple[Any, dict[str, Any] | None, str | None]:
        if outcome.ending == "timeout":
            return "timeout", None, f"the script exceeded its {timeout_s:g} s wall-clock limit and was killed"
        if outcome.ending == "output_limit":
            cap = self.runner.output.capture_bytes
            return "output_limit", None, f"the script wrote more than {cap} bytes of output and was killed"
        if outcome.ending == "memory_limit":
            cap = self.runner.limits.run_total_bytes
            return "memory_limit", None, (
                f"the script's processes together used more than {cap // (1024 * 1024)} MiB of memory and were killed "
                f"({outcome.memory_guard})")
        if outcome.ending == "disk_limit":
            return "disk_limit", None, (
                f"the script's files took more than {self.runner.limits.disk_total_bytes // (1024 * 1024)} MiB of disk "
                f"in its work dir and the host's shared temp dirs (or more than {COUNT_MAX_OWNED} entries, or "
                f"directories more than {MAX_DEPTH} deep) and it was killed; write less, or delete each file once it "
                "is no longer needed")
        if outcome.ending == "call_limit":
            return "call_limit", None, (
                f"the script sent more than {bridge.limits.max_calls} tool calls (denied ones count too) and was stopped")
        if outcome.ending == "audit_failed":
            return "error", None, (
                "the audit log could not record a bridge frame, so the run was stopped and its result refused")
        if outcome.ending == "protocol_error":
            detail = f": {outcome.stop_detail}" if outcome.stop_detail else ""
            return "error", None, f"the script broke the bridge protocol (malformed, oversized or forged frame) and was stopped{detail}"
        done = outcome.done
        if done is None:
            return "crashed", None, f"the sandbox child ended without a result ({_describe_exit(outcome)})"
        if not done.get("ok"):
            error = done.get("error")
            return "error", None, (safe_text(error, MAX_ERROR_CHARS) if isinstance(error, str) else "the script failed")
        value = done.get("value")
        if not isinstance(value, dict):
            return "error", None, "the script must return a JSON-serialisable dict"
        cap = self.runner.output.max_return_bytes
        frame = done.get(FRAME_SIZE)
        if isinstance(frame, FrameSize):  # every done frame the runner read has it (protocol.decode_frame)
            least = frame.least_json_bytes() - FRAME_ENVELOPE_BYTES
            if least > cap:  # refused by the frame's size: a value of up to max_frame_bytes is never walked
                return "error", None, _over_cap(f"at least {least}", cap)
        try:
            problem = await in_thread(_value_error, value, cap, budget_s=VALUE_CHECK_BUDGET_S,
                                      what="checking the return value")
        except BudgetExceeded as exc:
            return "error", None, f"the return value could not be checked: {exc}"
        if problem is not None:
            return "error", None, problem
        return "ok", value, None


def _over_cap(size: str, cap: int) -> str:
    return f"the return value is {size} bytes, over the {cap}-byte cap; return a summary and print details instead"


def _value_error(value: dict[str, Any], cap: int) -> str | None:
    """Why the return value cannot be reported (text not valid Unicode, too deep, over ``cap`` as UTF-8 JSON), or
    None. Sized by the value (bounded by the done frame's size): the service runs it in the offload pool."""
    problem = value_problem(value)
    if problem is not None:
        return f"the return value cannot be reported: {problem}; return plain data"
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > cap:
        return _over_cap(str(size), cap)
    return None


def transcript_blob(transcript: Mapping[str, Any]) -> bytes:
    """``json.dumps(transcript, ensure_ascii=False, sort_keys=True).encode("utf-8")``, byte for byte (the blob's
    format), built in short steps: a long text is escaped ``TRANSCRIPT_CHUNK_CHARS`` at a time (JSON escapes each
    character alone, so the pieces join to the same string), so the thread running this hands the GIL back to the
    event loop between steps. Raises as ``json.dumps`` and ``encode`` would (text that is not valid Unicode)."""
    parts = [b"{"]
    for n, key in enumerate(sorted(transcript)):
        value = transcript[key]
        parts.append((b", " if n else b"") + json.dumps(key, ensure_ascii=False).encode("utf-8") + b": ")
        if isinstance(value, str) and len(value) > TRANSCRIPT_CHUNK_CHARS:
            parts.append(b'"')
            for start in range(0, len(value), TRANSCRIPT_CHUNK_CHARS):
                piece = json.dumps(value[start:start + TRANSCRIPT_CHUNK_CHARS], ensure_ascii=False)
                parts.append(piece[1:-1].encode("utf-8"))
            parts.append(b'"')
        else:
            parts.append(json.dumps(value, ensure_ascii=False, sort_keys=True).encode("utf-8"))
    parts.append(b"}")
    return b"".join(parts)


def _describe_exit(outcome: ChildOutcome) -> str:
    code = outcome.exit_code
    if code is None:
        return "exit status unknown"
    signum = -code if code < 0 else (code - 128 if outcome.isolation == "bwrap" and code > 128 else None)
    if signum:
        return f"killed by {_SIGNALS.get(signum, f'signal {signum}')}"
    return f"exit code {code}"
