"""Execute generated code: one bridge per run, one child per run, scrubbed output, full transcript in a blob.

This is the service the ``execute_code`` activity calls. It owns no policy decisions: the caller
passes the allow-set (the trust policy decided it); this layer enforces it through the bridge.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from bamboo.audit import AuditSink, BlobSink
from bamboo.sandbox.bridge import ToolBridge
from bamboo.sandbox.models import BridgeLimits, SandboxRunResult, StreamCapture
from bamboo.sandbox.output import CappedStream, preview
from bamboo.sandbox.runner import ChildOutcome, SandboxRunner
from bamboo.tools.model import ToolCaller, ToolSpec
from policy.scrub import scrub_text, scrub_value

log = logging.getLogger(__name__)

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
    ) -> SandboxRunResult:
        bridge = ToolBridge(
            run_id=run_id,
            caller=self.caller,
            specs=self.current_specs(),
            allowed=allowed_tools,
            audit=self.audit,
            actor=actor,
            limits=bridge_limits,
        )
        outcome = await self.runner.run(code, bridge, timeout_s=timeout_s)
        return await self._report(run_id, outcome, bridge, timeout_s)

    async def _report(self, run_id: str, outcome: ChildOutcome, bridge: ToolBridge, timeout_s: float) -> SandboxRunResult:
        out_text, out_hits = _scrubbed(outcome.stdout)
        err_text, err_hits = _scrubbed(outcome.stderr)
        status, value, error = self._interpret(outcome, timeout_s)
        if value is not None:
            value, _ = scrub_value(value)
        if error is not None:
            error = scrub_text(error).text
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
        if out_text or err_text or error:
            ref = await self.blobs.put(json.dumps(transcript, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        warnings = list(outcome.warnings)
        if outcome.isolation == "degraded":
            log.warning("sandbox run %s ran DEGRADED (no bwrap namespaces)", run_id)
        return SandboxRunResult(
            run_id=run_id,
            status=status,
            isolation=outcome.isolation,
            warnings=warnings,
            return_value=value,
            error=error,
            stdout=self._capture(out_text, outcome.stdout, out_hits),
            stderr=self._capture(err_text, outcome.stderr, err_hits),
            full_output_ref=ref,
            calls=list(bridge.calls),
            exit_code=outcome.exit_code,
            duration_ms=round(outcome.duration_ms, 3),
            warm_start=outcome.warm_start,
        )

    def _capture(self, text: str, stream: CappedStream, hits: int) -> StreamCapture:
        shown, cut = preview(text, self.runner.output.preview_bytes)
        return StreamCapture(preview=shown, total_bytes=stream.total, truncated=cut or stream.overflowed, redactions=hits)

    def _interpret(self, outcome: ChildOutcome, timeout_s: float) -> tuple[Any, dict[str, Any] | None, str | None]:
        if outcome.ending == "timeout":
            return "timeout", None, f"the script exceeded its {timeout_s:g} s wall-clock limit and was killed"
        if outcome.ending == "output_limit":
            cap = self.runner.output.capture_bytes
            return "output_limit", None, f"the script wrote more than {cap} bytes of output and was killed"
        if outcome.ending == "protocol_error":
            return "error", None, "the script broke the bridge protocol (malformed, oversized or forged frame) and was stopped"
        done = outcome.done
        if done is None:
            return "crashed", None, f"the sandbox child ended without a result ({_describe_exit(outcome)})"
        if not done.get("ok"):
            return "error", None, str(done.get("error") or "the script failed")
        value = done.get("value")
        if not isinstance(value, dict):
            return "error", None, "the script must return a JSON-serialisable dict"
        size = len(json.dumps(value).encode("utf-8"))
        if size > self.runner.output.max_return_bytes:
            return "error", None, (
                f"the return value is {size} bytes, over the {self.runner.output.max_return_bytes}-byte cap; "
                "return a summary and print details instead"
            )
        return "ok", value, None


def _scrubbed(stream: CappedStream) -> tuple[str, int]:
    result = scrub_text(stream.text())
    return result.text, len(result.findings)


def _describe_exit(outcome: ChildOutcome) -> str:
    code = outcome.exit_code
    if code is None:
        return "exit status unknown"
    signum = -code if code < 0 else (code - 128 if outcome.isolation == "bwrap" and code > 128 else None)
    if signum:
        return f"killed by {_SIGNALS.get(signum, f'signal {signum}')}"
    return f"exit code {code}"
