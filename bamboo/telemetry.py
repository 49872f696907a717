"""OpenTelemetry traces and Prometheus metrics, configured once per process.

Traces: Temporal's tracing interceptor is installed on the *client* only; a worker built from that client
inherits it (the SDK uses a client interceptor that is also a worker interceptor on every worker of that
client), so each workflow and activity span is emitted once. (Installing it on the worker as well doubled
every worker span.) The process names itself: ``bamboo-worker`` or ``bamboo-client``. The OTLP endpoint is
the usual base URL (``http://collector:4318``); ``/v1/traces`` is added. The console exporter writes to a
file under the data directory, never into an operator's interactive screen; the file is its owner's alone (0600,
in a 0700 ``logs``), whoever starts the process: spans name sessions and tools, and at 0644 in a 0755 directory a
degraded sandbox run (another uid on the same host) read other runs' tool errors from it.

One trace per CLI command: the interceptor makes a root span for every client call made outside a span, so
a ``bamboo populate`` that polled its batch's progress 2,641 times made 2,641 traces. ``command_span`` opens
one root span per command (``bamboo populate``), and every client call the command makes is its child.
Polls run under ``untraced`` (neither the client nor the worker records a span for them) and the caller
records what changed as an event on the command's span (``progress_event``).

Nothing here imports OpenTelemetry until tracing is on (``BAMBOO_OTEL_EXPORTER`` other than ``none``): the
SDK and Temporal's tracing module cost a CLI command about a third of a second to import.

Metrics: the worker's Temporal runtime serves the SDK's own metrics on a Prometheus endpoint
(``BAMBOO_METRICS_BIND``), and the product's counters (``bamboo.metrics``) are recorded on the same meter,
so one scrape shows both, every series labelled ``service_name="bamboo-worker"``. Outside a worker the
counters are no-ops.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bamboo.metrics import METRICS
from bamboo.settings import Settings

if TYPE_CHECKING:
    from temporalio.runtime import Runtime

log = logging.getLogger(__name__)

_configured: str | None = None
_console_files: list[Any] = []
OTLP_TRACES_PATH = "/v1/traces"
WORKER_SERVICE = "bamboo-worker"
CLIENT_SERVICE = "bamboo-client"
TRACER_NAME = "bamboo.cli"


def otlp_traces_url(endpoint: str) -> str:
    """The traces URL for an OTLP/HTTP endpoint given as the usual base URL (or already as the full URL)."""
    base = endpoint.rstrip("/")
    return base if base.endswith(OTLP_TRACES_PATH) else base + OTLP_TRACES_PATH


def console_span_path(settings: Settings, service: str) -> Path:
    return settings.resolved_data_dir() / "logs" / f"{service}-spans.log"


def configure_tracing(settings: Settings, service: str) -> list:
    """Install this process's tracer provider (first caller names the service); the client interceptors.

    With tracing off there is no interceptor: its spans would be no-ops, and importing it is most of what
    tracing costs a short command."""
    if settings.otel_exporter == "none" and _configured is None:
        return []
    if _configured is None:
        _install_provider(settings, service)
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


def _install_provider(settings: Settings, service: str) -> None:
    global _configured
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if settings.otel_exporter == "console":
        out = open_console_file(console_span_path(settings, service))
        _console_files.append(out)
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=out)))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = otlp_traces_url(settings.otel_endpoint) if settings.otel_endpoint else None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    _configured = service


def open_console_file(path: Path) -> Any:
    """The console span file, appended to, open to its owner alone: the file 0600 and its directory 0700, made so
    or closed again when an earlier version (or ``mkdir`` under umask 022) left them open. The data directory
    above stays as it is (embedded Postgres, run as its own user, must traverse it; ``devstack.stack``)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        path.parent.chmod(0o700)
    except OSError as exc:  # not ours to close (another owner): the file itself is still 0600
        log.warning("could not make %s private (%s); the span file in it is 0600", path.parent, exc)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "a", encoding="utf-8")  # lives as long as the process
    except BaseException:
        os.close(fd)
        raise


def use_tracer_provider(provider: Any, service: str = CLIENT_SERVICE) -> None:
    """Install a provider built elsewhere (a test's in-memory exporter) as this process's tracing."""
    global _configured
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    _configured = service


def flush_tracing(timeout_s: float = 5.0) -> None:
    """Export what is buffered (a short-lived command would otherwise lose its last spans)."""
    if _configured is None:
        return
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    force = getattr(provider, "force_flush", None)
    if force is not None:
        force(int(timeout_s * 1000))


@contextlib.contextmanager
def command_span(settings: Settings, name: str) -> Iterator[Any]:
    """The root span of one CLI command (``bamboo populate``): every client call it makes is its child, so
    the command is one trace. Yields the span, or None when tracing is off; flushes when the command ends.

    The exit status is recorded as ``bamboo.exit_code``; a non-zero one, or an exception, marks the span as
    an error."""
    if settings.otel_exporter == "none" and _configured is None:
        yield None
        return
    if _configured is None:
        _install_provider(settings, CLIENT_SERVICE)
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    tracer = trace.get_tracer(TRACER_NAME)
    try:
        with tracer.start_as_current_span(name, record_exception=False, set_status_on_exception=False,
                                          attributes={"bamboo.command": name}) as span:
            try:
                yield span
            except BaseException as exc:
                code = _exit_status(exc)
                if code is None:
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:200]))
                else:
                    _ended(span, code)
                raise
            else:
                _ended(span, 0)
    finally:
        flush_tracing()


def _exit_status(exc: BaseException) -> int | None:
    """The exit status an exception ends the command with (the console script's SystemExit, typer's or
    click's Exit); None for a failure."""
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    code = getattr(exc, "exit_code", None)
    return code if isinstance(code, int) else None


def _ended(span: Any, code: int) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("bamboo.exit_code", code)
    if code != 0:
        span.set_status(Status(StatusCode.ERROR, f"exit status {code}"))


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """Client calls made inside record no span, on the client or on the worker that answers them.

    For polls: a progress query every half second is not worth a span each (they were 91% of all spans).
    The calls run under a parent that is not sampled, so the interceptor's spans are not recorded and the
    context it sends the worker says so too (the worker's sampler follows its parent). The caller records
    what the polls found as events (``progress_event``)."""
    if _configured is None:
        yield
        return
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    current = trace.get_current_span().get_span_context()
    trace_id = current.trace_id if current.is_valid else int.from_bytes(secrets.token_bytes(16), "big") or 1
    span_id = current.span_id if current.is_valid else int.from_bytes(secrets.token_bytes(8), "big") or 1
    quiet = NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.DEFAULT)))
    token = context.attach(trace.set_span_in_context(quiet))
    try:
        yield
    finally:
        context.detach(token)


def progress_event(name: str, attributes: dict[str, Any]) -> None:
    """An event on the current span (the command's), e.g. what a progress poll found; nothing when tracing
    is off. Attribute values that are None are left out (OpenTelemetry has no null)."""
    if _configured is None:
        return
    from opentelemetry import trace

    trace.get_current_span().add_event(name, {k: v for k, v in attributes.items() if v is not None})


def set_command_attribute(key: str, value: Any) -> None:
    """An attribute on the current span (the command's); nothing when tracing is off."""
    if _configured is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attribute(key, value)


def metrics_telemetry(bind: str, service: str = WORKER_SERVICE) -> Any:
    """The runtime's telemetry: Prometheus on ``bind``, every series labelled ``service_name=<service>``.

    temporalio's ``attach_service_name`` (on by default) labels every series ``service_name=
    "temporal-core-sdk"``, and a ``service_name`` in ``global_tags`` is added beside it, not instead (the
    scrape then shows the label twice); so the SDK's is off and ours is the global tag."""
    from temporalio.runtime import PrometheusConfig, TelemetryConfig

    return TelemetryConfig(metrics=PrometheusConfig(bind_address=bind), attach_service_name=False,
                           global_tags={"service_name": service})


def worker_runtime(settings: Settings) -> Runtime | None:
    """A Temporal runtime serving Prometheus metrics when ``metrics_bind`` is set (else the default one)."""
    if not settings.metrics_bind:
        return None
    from temporalio.runtime import Runtime

    runtime = Runtime(telemetry=metrics_telemetry(settings.metrics_bind))
    METRICS.bind(runtime.metric_meter)
    return runtime
