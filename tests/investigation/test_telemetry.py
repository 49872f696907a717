"""Telemetry an operator can use, against a real OTLP/HTTP receiver on loopback and the worker's Prometheus
endpoint: every worker span once, named for the worker, PanDA and bridged tool calls traced with their tool
name and outcome, counters beside the SDK's metrics; a CLI's console spans never land on its screen."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import pytest

from bamboo.devstack.ports import free_port
from bamboo.investigation import client as inv
from policy.decisions import DecisionKind
from tests.investigation.conftest import READ_CODE, TASK_ID, kill_process_group, new_session, pending_turn, wait_for
from tests.services import ROOT, worker_env
from tests.support.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.usefixtures("terminate_sessions")


def _worker(settings, log, extra: dict[str, str]) -> subprocess.Popen:
    env = worker_env(settings)
    env.update({"BAMBOO_PANDA_API_URL": settings.panda_api_url, "BAMBOO_PANDA_MONITOR_URL": settings.panda_monitor_url,
                **extra})
    return subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


async def test_worker_spans_once_with_tool_spans_and_prometheus_metrics(ops, client, settings, brain, tmp_path):
    metrics_bind = f"127.0.0.1:{free_port()}"
    with OtlpReceiver() as receiver:
        worker = _worker(settings, tmp_path / "worker.log", {
            "BAMBOO_OTEL_EXPORTER": "otlp", "BAMBOO_OTEL_ENDPOINT": receiver.base_url,  # the usual base URL
            "BAMBOO_METRICS_BIND": metrics_bind})
        try:
            session = new_session()
            brain.propose(READ_CODE, READ_CODE)
            await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID,
                                                    startup_hypothesis=False))
            await inv.send_message(client, session, "status?", ops.alice)
            view = await pending_turn(client, session, 1)
            await inv.decide_by_review(client, session, view.review, DecisionKind.RUN_ONCE, ops.bob)

            async def ran():
                return [e for e in await inv.transcript(client, session) if e.kind == "reply" and e.turn == 1]
            await wait_for(ran, timeout=90)
            metrics = (await asyncio.to_thread(httpx.get, f"http://{metrics_bind}/metrics", timeout=10)).text

            await inv.send_message(client, session, "status again?", ops.alice)
            await pending_turn(client, session, 2)
            env = worker_env(settings)
            env.update({"BAMBOO_OTEL_EXPORTER": "console", "BAMBOO_DATA_DIR": str(tmp_path / "cli-data")})
            listed = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "approvals"],
                                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        finally:
            worker.terminate()  # a clean stop flushes the last spans
            await asyncio.to_thread(worker.wait, 30)
            kill_process_group(worker)

        async def exported():
            return receiver.spans if any(s.name == "panda.tool" for s in receiver.spans) else None
        spans = await wait_for(exported, timeout=30)

    worker_spans = [s for s in spans if s.service == "bamboo-worker"]
    assert worker_spans and {s.service for s in spans} == {"bamboo-worker"}
    runs = [s for s in worker_spans if s.name == "RunActivity:execute_code"]
    assert len(runs) == 1, [s.name for s in worker_spans]  # one run, one span (it was two: doubled interceptors)
    assert len({s.span_id for s in worker_spans}) == len(worker_spans)
    panda = [s for s in worker_spans if s.name == "panda.tool"]
    assert panda[0].attributes["tool.name"] == "get_task_details" and panda[0].attributes["tool.outcome"] == "ok"
    bridged = [s for s in worker_spans if s.name == "sandbox.tool_call"]
    assert bridged[0].attributes["tool.name"] == "get_task_details" and bridged[0].attributes["tool.outcome"] == "allowed"

    assert "temporal_" in metrics
    assert "bamboo_sandbox_runs" in metrics and 'status="ok"' in metrics
    assert "bamboo_tool_calls" in metrics and "bamboo_llm_calls" in metrics

    assert listed.returncode == 0, listed.stderr
    assert "trace_id" not in listed.stdout and "trace_id" not in listed.stderr
    spans_file = tmp_path / "cli-data" / "logs" / "bamboo-client-spans.log"
    assert spans_file.exists() and "trace_id" in spans_file.read_text()


def test_the_otlp_endpoint_is_the_usual_base_url():
    from bamboo.telemetry import otlp_traces_url

    assert otlp_traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert otlp_traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert otlp_traces_url("http://collector:4318/v1/traces") == "http://collector:4318/v1/traces"
