"""Spans recorded in memory, for tests that read what the process traced."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bamboo import telemetry


@contextlib.contextmanager
def spans_in_memory(configured: str | None = None) -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on this process's tracer provider (installed here unless a provider is already there:
    the global provider can be set once per process). ``configured`` marks this process's tracing as set up for
    that service while it lasts; whatever it was is put back afterwards."""
    memory = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    was = telemetry._configured
    if not hasattr(provider, "add_span_processor"):
        provider = TracerProvider()
        telemetry.use_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(memory))  # type: ignore[attr-defined]
    if configured is not None:
        telemetry._configured = configured
    try:
        yield memory
    finally:
        telemetry._configured = was
