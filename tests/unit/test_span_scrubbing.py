"""Spans keep no more of a failure than the audit log does, and the console span file is its owner's alone.

A span leaves the worker (an OTLP collector, the console file under the data directory). The bridge put a tool's
raw exception text into ``tool.reason`` and the PanDA toolbox its raw error into ``tool.error``, while the audit
row held the same text scrubbed; and the console span file was 0644 in a 0755 ``logs``, where a degraded sandbox
run (another uid on the host) read other runs' tool errors from it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bamboo import telemetry
from tests.support.spans import spans_in_memory
from bamboo.audit import MemoryAuditSink
from bamboo.panda.errors import PandaUnavailable
from bamboo.panda.toolbox import PandaToolbox
from bamboo.panda.tools import BuiltinTool
from bamboo.sandbox.bridge import ToolBridge
from bamboo.settings import Settings
from bamboo.tools.model import ToolSpec

SECRET = "hunter2xyz" + "Q7"
LEAK = f"connect to https://panda.example/api?x=1 failed for session inc-42 password={SECRET}"
SPEC = ToolSpec(name="get_task", description="Fetch a task.", read_only=True,
                input_schema={"type": "object", "properties": {"task_id": {"type": "integer"}}, "required": ["task_id"]})


@pytest.fixture(scope="module")
def exporter():
    with spans_in_memory() as memory:
        yield memory


@pytest.fixture
def spans(exporter):
    exporter.clear()
    return exporter


def _attribute(spans: InMemorySpanExporter, span_name: str, key: str) -> Any:
    [span] = [s for s in spans.get_finished_spans() if s.name == span_name]
    return span.attributes[key]


class _Raising:
    def list_tools(self) -> list[ToolSpec]:
        return [SPEC]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        raise RuntimeError(LEAK)


async def test_the_bridge_span_keeps_a_tool_exception_only_as_the_audit_row_does(spans):
    audit = MemoryAuditSink()
    bridge = ToolBridge(run_id="run-1", caller=_Raising(), specs=[SPEC], allowed=frozenset({"get_task"}), audit=audit)
    reply = await bridge.handle_call({"type": "call", "token": bridge.token, "id": 1, "tool": "get_task",
                                      "args": {"task_id": 1}})
    assert reply["ok"] is False
    [row] = [e.body for e in audit.events if e.kind == "tool_call"]
    reason = _attribute(spans, "sandbox.tool_call", "tool.reason")
    assert SECRET not in reason and "REDACTED" in reason, reason
    assert reason == row["reason"]
    assert "session inc-42" in reason  # scrubbed, not dropped: the operator still sees what failed


async def test_the_toolbox_span_keeps_a_panda_error_scrubbed(spans):
    async def handler(client: Any, args: dict[str, Any]) -> Any:
        raise PandaUnavailable(LEAK)

    toolbox = PandaToolbox(client=None, tools=[BuiltinTool(SPEC, handler)])  # type: ignore[arg-type]
    result = await toolbox.call_tool("get_task", {"task_id": 1})
    assert not result.ok
    error = _attribute(spans, "panda.tool", "tool.error")
    assert SECRET not in error and "REDACTED" in error and "PanDA is unreachable" in error, error
    assert len(error) < 400


@pytest.mark.parametrize("existing", [False, True], ids=["fresh", "left-open-by-an-older-version"])
def test_the_console_span_file_is_its_owners_alone(tmp_path, monkeypatch, existing):
    _console_tracing_without_a_provider(monkeypatch)
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", otel_exporter="console")
    path = telemetry.console_span_path(settings, telemetry.WORKER_SERVICE)
    old = os.umask(0o022)  # the usual umask of whoever starts a worker
    try:
        if existing:
            path.parent.mkdir(parents=True, mode=0o755)
            path.write_text("older spans\n")
        telemetry._install_provider(settings, telemetry.WORKER_SERVICE)
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        if existing:
            assert path.read_text().startswith("older spans\n")  # appended to, never truncated
    finally:
        _close_console_files()


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another uid needs root")
def test_another_uid_on_the_host_cannot_read_the_console_span_file(monkeypatch):
    """What a degraded sandbox run is: another uid with the host's filesystem. The data dir stays open to others
    (embedded Postgres must traverse it), so only the logs directory and the file keep the run out."""
    _console_tracing_without_a_provider(monkeypatch)
    data = Path(tempfile.mkdtemp(prefix="bamboo-test-data-"))  # traversable by others, as a deployment's is
    data.chmod(0o755)
    old = os.umask(0o022)
    try:
        settings = Settings(_env_file=None, data_dir=data, otel_exporter="console")
        path = telemetry.console_span_path(settings, telemetry.WORKER_SERVICE)
        telemetry._install_provider(settings, telemetry.WORKER_SERVICE)
        telemetry._console_files[0].write(f'"tool.reason": "{LEAK}"\n')
        telemetry._console_files[0].flush()
        probe = ("import sys\ntry:\n    sys.stdout.write(open(sys.argv[1]).read())\n"
                 "except OSError as exc:\n    sys.stdout.write(type(exc).__name__)\n")
        out = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", probe, str(path)], capture_output=True, text=True,
                             timeout=30, user=65534, group=65534, extra_groups=[], cwd="/")
        assert out.stdout == "PermissionError", out.stdout + out.stderr
    finally:
        os.umask(old)
        _close_console_files()
        shutil.rmtree(data, ignore_errors=True)


def _console_tracing_without_a_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_install_provider`` as a worker calls it, leaving this process's tracer provider as it is."""
    monkeypatch.setattr(telemetry, "_configured", None)
    monkeypatch.setattr(telemetry, "_console_files", [])
    monkeypatch.setattr(trace, "set_tracer_provider", lambda provider: None)
    monkeypatch.setattr("opentelemetry.sdk.trace.export.BatchSpanProcessor", SimpleSpanProcessor)  # no thread left


def _close_console_files() -> None:
    for fh in telemetry._console_files:
        fh.close()
