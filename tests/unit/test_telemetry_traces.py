"""Telemetry worth reading: one trace per CLI command, progress polls as events on it (not a span each), the
worker's metrics named for the worker, and every model call counted (text calls and embeddings too).

The client calls go through Temporal's own tracing interceptor (its client side, over a stub that answers
instead of a server), so what is measured is what the interceptor records."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from temporalio.client import OutboundInterceptor, QueryWorkflowInput, SignalWorkflowInput
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.converter import PayloadConverter
from temporalio.runtime import Runtime
from typer.testing import CliRunner

from bamboo import telemetry
from tests.support.spans import spans_in_memory
from bamboo.cli import batch_progress
from bamboo.devstack.ports import free_port
from bamboo.embeddings.remote import OpenAIEmbedder
from bamboo.llm.client import LLMClient
from bamboo.llm.errors import LLMError
from bamboo.metrics import METRICS
from bamboo.settings import Settings


@pytest.fixture(scope="module")
def exporter():
    with spans_in_memory("bamboo-client") as memory:
        yield memory


@pytest.fixture
def spans(exporter):
    exporter.clear()
    return exporter


class _Server(OutboundInterceptor):
    """Where the interceptor's calls end: answers queries from a script, records the headers sent."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.headers: list[dict] = []

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self.headers.append(dict(input.headers))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        self.headers.append(dict(input.headers))


def _progress(done: int, total: int = 3) -> SimpleNamespace:
    return SimpleNamespace(total=total, done=done, failed=0, skipped=0, running=total - done, paused=False,
                           cancelled=False)


class _Batch:
    """A batch as ``follow`` reads it, whose progress query goes through the tracing interceptor."""

    def __init__(self, answers: list[Any]) -> None:
        self.server = _Server(answers)
        self.client = TracingInterceptor().intercept_client(self.server)
        self.polls = 0
        self.id = "populate:traced"

    async def running(self) -> bool:
        return self.polls < 4

    async def progress(self) -> Any:
        self.polls += 1
        return await self.client.query_workflow(QueryWorkflowInput(
            id=self.id, run_id=None, query="progress", args=[], reject_condition=None, headers={}, ret_type=None,
            rpc_metadata={}, rpc_timeout=None))

    async def signal(self) -> None:
        await self.client.signal_workflow(SignalWorkflowInput(
            id=self.id, run_id=None, signal="pause", args=[], headers={}, rpc_metadata={}, rpc_timeout=None))

    async def result(self) -> Any:
        return _progress(3)


def _traced_settings() -> Settings:
    return Settings(_env_file=None, otel_exporter="console")


def test_a_command_is_one_trace_and_its_progress_polls_are_events_not_spans(spans, monkeypatch):
    monkeypatch.setattr(batch_progress, "EVENT_EVERY_S", 0.0)
    monkeypatch.setattr(batch_progress, "asyncio", SimpleNamespace(sleep=_no_sleep, CancelledError=asyncio.CancelledError))
    batch = _Batch([_progress(0), _progress(0), _progress(1), _progress(3)])

    async def command() -> None:
        await batch.signal()  # a client call of the command's own: a child span
        await batch_progress.follow(batch, "bamboo populate --attach traced", quiet=True)  # type: ignore[arg-type]

    with telemetry.command_span(_traced_settings(), "bamboo populate"):
        asyncio.run(command())

    finished = spans.get_finished_spans()
    assert len({s.context.trace_id for s in finished}) == 1, [s.name for s in finished]
    [root] = [s for s in finished if s.parent is None]
    assert root.name == "bamboo populate" and root.attributes["bamboo.exit_code"] == 0
    assert [s.name for s in finished if s is not root] == ["SignalWorkflow:pause"]  # no QueryWorkflow:progress
    assert root.attributes["bamboo.progress_polls"] == 4
    events = [e for e in root.events if e.name == "batch.progress"]
    assert [e.attributes["completed"] for e in events] == [0, 1, 3]  # one per change, not one per poll
    assert [e.name for e in root.events][-1] == "batch.result"

    # What a poll tells the worker: the command's trace, not sampled, so the worker records no span either.
    carriers = [PayloadConverter.default.from_payloads([h["_tracer-data"]])[0] for h in batch.server.headers[1:]]
    assert carriers and all(c["traceparent"].endswith("-00") for c in carriers), carriers
    assert all(c["traceparent"].split("-")[1] == f"{root.context.trace_id:032x}" for c in carriers)


async def _no_sleep(_seconds: float) -> None:
    await asyncio.sleep(0)


def test_the_cli_runs_each_command_in_a_root_span_named_for_it(spans, monkeypatch):
    from bamboo.cli.main import app
    from bamboo.settings import get_settings

    # The settings are read once per process; another test in this process may have read them without
    # tracing, so each invocation here reads them from its own environment.
    real = get_settings.__wrapped__
    monkeypatch.setattr("bamboo.cli.main.get_settings", lambda: real())
    result = CliRunner().invoke(app, ["config", "show", "--json"], env={"BAMBOO_OTEL_EXPORTER": "console"})
    assert result.exit_code == 0, result.output
    [root] = spans.get_finished_spans()
    assert root.name == "bamboo config show" and root.parent is None
    assert root.attributes["bamboo.exit_code"] == 0

    spans.clear()
    result = CliRunner().invoke(app, ["kb", "graph", "nothing:1:x", "--json"],
                                env={"BAMBOO_OTEL_EXPORTER": "console", "BAMBOO_DATABASE_URL": "postgresql://127.0.0.1:9/x"})
    assert result.exit_code != 0
    [root] = spans.get_finished_spans()
    assert root.name == "bamboo kb graph" and root.attributes["bamboo.exit_code"] == result.exit_code
    assert root.status.status_code.name == "ERROR"


_UNTRACED_PROBE = """
import sys
from typer.testing import CliRunner
from bamboo.cli.main import app
from bamboo.settings import Settings
from bamboo.telemetry import configure_tracing
assert configure_tracing(Settings(_env_file=None), "bamboo-client") == []
result = CliRunner().invoke(app, ["config", "show", "--json"])
assert result.exit_code == 0, result.output
print(sorted(m for m in sys.modules if m.startswith(("opentelemetry", "temporalio.contrib.opentelemetry"))))
"""


def test_with_tracing_off_the_cli_imports_no_opentelemetry() -> None:
    env = {"PATH": "/usr/bin:/bin", "BAMBOO_OTEL_EXPORTER": "none"}
    out = subprocess.run([sys.executable, "-c", _UNTRACED_PROBE], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_the_worker_metrics_carry_the_worker_service_name() -> None:
    """Scraped from a real runtime's Prometheus endpoint: each series has one service_name, the worker's
    (temporalio's default labels every series "temporal-core-sdk", and a global tag alone adds a second)."""
    bind = f"127.0.0.1:{free_port()}"
    runtime = Runtime(telemetry=telemetry.metrics_telemetry(bind))
    counters = type(METRICS)()
    counters.bind(runtime.metric_meter)
    counters.llm_text_call("ok")
    runtime.metric_meter.create_gauge("temporal_probe", "a series named as the SDK's are").set(1)

    body = ""
    for _ in range(50):  # the exporter serves its first scrape shortly after start
        try:
            body = urllib.request.urlopen(f"http://{bind}/metrics", timeout=5).read().decode()
        except OSError:
            body = ""
        if "bamboo_llm_calls" in body:
            break
        import time

        time.sleep(0.1)
    series = [line for line in body.splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("bamboo_llm_calls{") for line in series), body
    assert "temporal-core-sdk" not in body
    for line in series:
        assert line.count("service_name=") == 1 and 'service_name="bamboo-worker"' in line, line


class _Counted:
    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    def add(self, value: int, attributes: Any = None) -> None:
        self.calls.append(dict(attributes or {}))


def _chat(reply: str, status: int = 200) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "down"}})
        return httpx.Response(200, json={"choices": [{"message": {"content": reply}, "finish_reason": "stop"}]})
    return httpx.MockTransport(handle)


class _Answer(BaseModel):
    answer: str


async def test_every_model_call_is_counted_with_its_kind(monkeypatch):
    llm = _Counted()
    monkeypatch.setattr(METRICS, "_llm", llm)

    async with LLMClient(base_url="http://model/v1", model="m", transport=_chat("prose")) as client:
        assert await client.text(system="s", user="u") == "prose"
    async with LLMClient(base_url="http://model/v1", model="m", transport=_chat(json.dumps({"answer": "a"}))) as client:
        await client.structured(system="s", user="u", output=_Answer, name="answer")
    async with LLMClient(base_url="http://model/v1", model="m", transport=_chat("", status=500)) as client:
        with pytest.raises(LLMError):
            await client.text(system="s", user="u")

    assert llm.calls == [
        {"kind": "text", "schema": "none", "outcome": "ok"},
        {"kind": "structured", "schema": "answer", "outcome": "ok"},
        {"kind": "text", "schema": "none", "outcome": "failed"},
    ]


async def test_embedding_requests_are_counted_apart_from_chat_calls(monkeypatch):
    embed, llm = _Counted(), _Counted()
    monkeypatch.setattr(METRICS, "_embed", embed)
    monkeypatch.setattr(METRICS, "_llm", llm)

    def handle(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        return httpx.Response(200, json={"data": [{"index": i, "embedding": [0.0, 1.0]} for i in range(len(texts))]})

    embedder = OpenAIEmbedder(base_url="http://embed/v1", model="e", dim=2, batch_size=2,
                              http_client=httpx.AsyncClient(transport=httpx.MockTransport(handle)))
    assert len(await embedder.embed(["a", "b", "c"])) == 3
    await embedder.aclose()
    assert embed.calls == [{"source": "endpoint", "outcome": "ok"}] * 2  # one per request of up to 2 texts
    assert llm.calls == []


class _SessionOps:
    """The session queries `bamboo investigate` polls, each through the tracing interceptor."""

    def __init__(self) -> None:
        from datetime import datetime, timezone

        from bamboo.investigation.contract import TranscriptEntry

        first = TranscriptEntry(seq=1, at=datetime.now(timezone.utc), kind="reply", text="the task failed", turn=1)
        self.server = _Server([[first], []])
        self.client = TracingInterceptor().intercept_client(self.server)

    async def _query(self, name: str) -> Any:
        return await self.client.query_workflow(QueryWorkflowInput(
            id="investigate:traced", run_id=None, query=name, args=[], reject_condition=None, headers={},
            ret_type=None, rpc_metadata={}, rpc_timeout=None))

    async def transcript(self, session_id: str, after: int) -> Any:
        return await self._query("transcript")

    async def pending(self, session_id: str) -> None:
        await self.client.query_workflow(QueryWorkflowInput(
            id="investigate:traced", run_id=None, query="pending", args=[], reject_condition=None, headers={},
            ret_type=None, rpc_metadata={}, rpc_timeout=None))
        return None


def test_an_attached_session_polls_without_a_span_each(spans, monkeypatch):
    """`bamboo investigate` follows its session by polling the transcript and the pending review: the polls
    record no span (they would swamp the trace as the populate's did), what they found is an event."""
    from bamboo.cli import investigate_cmd

    monkeypatch.setattr(investigate_cmd, "POLL_S", 0.0)
    monkeypatch.setattr(investigate_cmd, "print_entry", lambda entry, verbose: None)
    ops = _SessionOps()
    loop = investigate_cmd.SessionLoop(ops, "traced", None, False, None)  # type: ignore[arg-type]
    with telemetry.command_span(_traced_settings(), "bamboo investigate"):
        assert asyncio.run(loop.follow_until_idle(None)) is True

    finished = spans.get_finished_spans()
    [root] = [s for s in finished if s.parent is None]
    assert [s.name for s in finished if s is not root] == [], "no QueryWorkflow span per poll"
    assert len(ops.server.headers) >= 6  # the polls did reach the server
    [event] = [e for e in root.events if e.name == "session.transcript"]
    assert event.attributes["entries"] == 1 and list(event.attributes["kinds"]) == ["reply"]
