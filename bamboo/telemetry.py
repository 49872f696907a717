"""OpenTelemetry wiring: Temporal's tracing interceptor on client and worker; console or OTLP by setting."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from temporalio.contrib.opentelemetry import TracingInterceptor

from bamboo.settings import Settings

_configured = False


def configure_tracing(settings: Settings, service: str) -> list:
    """Install a tracer provider once per process; returns the interceptors to pass to client/worker."""
    global _configured
    if settings.otel_exporter == "none":
        return [TracingInterceptor()]  # spans go to the no-op provider; context still propagates
    if not _configured:
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        if settings.otel_exporter == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otel_endpoint)))
        trace.set_tracer_provider(provider)
        _configured = True
    return [TracingInterceptor()]
