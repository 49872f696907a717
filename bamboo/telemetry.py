"""OpenTelemetry traces and Prometheus metrics, configured once per process.

Traces: Temporal's tracing interceptor is installed on the *client* only; a worker built from that client
inherits it (the SDK uses a client interceptor that is also a worker interceptor on every worker of that
client), so each workflow and activity span is emitted once. (Installing it on the worker as well doubled
every worker span.) The process names itself: ``bamboo-worker`` or ``bamboo-client``. The OTLP endpoint is
the usual base URL (``http://collector:4318``); ``/v1/traces`` is added. The console exporter writes to a
file under the data directory, never into an operator's interactive screen.

Metrics: the worker's Temporal runtime serves the SDK's own metrics on a Prometheus endpoint
(``BAMBOO_METRICS_BIND``), and the product's counters (``bamboo.metrics``) are recorded on the same meter,
so one scrape shows both. Outside a worker the counters are no-ops.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from bamboo.metrics import METRICS
from bamboo.settings import Settings

_configured: str | None = None
_console_files: list[Any] = []
OTLP_TRACES_PATH = "/v1/traces"


def otlp_traces_url(endpoint: str) -> str:
    """The traces URL for an OTLP/HTTP endpoint given as the usual base URL (or already as the full URL)."""
    base = endpoint.rstrip("/")
    return base if base.endswith(OTLP_TRACES_PATH) else base + OTLP_TRACES_PATH


def console_span_path(settings: Settings, service: str) -> Path:
    return settings.resolved_data_dir() / "logs" / f"{service}-spans.log"


def configure_tracing(settings: Settings, service: str) -> list:
    """Install this process's tracer provider (first caller names the service); the client interceptors."""
    global _configured
    if settings.otel_exporter != "none" and _configured is None:
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        if settings.otel_exporter == "console":
            path = console_span_path(settings, service)
            path.parent.mkdir(parents=True, exist_ok=True)
            out = open(path, "a", encoding="utf-8")  # noqa: SIM115 — lives as long as the process
            _console_files.append(out)
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=out)))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            endpoint = otlp_traces_url(settings.otel_endpoint) if settings.otel_endpoint else None
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        trace.set_tracer_provider(provider)
        _configured = service
    return [TracingInterceptor()]  # with no provider configured, spans are no-ops; context still propagates


def flush_tracing(timeout_s: float = 5.0) -> None:
    """Export what is buffered (a short-lived command would otherwise lose its last spans)."""
    provider = trace.get_tracer_provider()
    force = getattr(provider, "force_flush", None)
    if force is not None:
        force(int(timeout_s * 1000))


def worker_runtime(settings: Settings) -> Runtime | None:
    """A Temporal runtime serving Prometheus metrics when ``metrics_bind`` is set (else the default one)."""
    if not settings.metrics_bind:
        return None
    runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=settings.metrics_bind)))
    METRICS.bind(runtime.metric_meter)
    return runtime
