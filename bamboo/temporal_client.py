"""One way to reach Temporal, for the CLI, the worker and the tests alike."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime

from bamboo.settings import Settings
from bamboo.telemetry import configure_tracing


class TemporalUnavailable(RuntimeError):
    pass


async def connect(settings: Settings, *, service: str = "bamboo-client", runtime: Runtime | None = None) -> Client:
    """A client whose tracing interceptor every worker built on it inherits (so spans are emitted once)."""
    try:
        return await Client.connect(
            settings.temporal_address, namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter, interceptors=configure_tracing(settings, service),
            runtime=runtime,
        )
    except RuntimeError as exc:
        raise TemporalUnavailable(
            f"Cannot reach Temporal at {settings.temporal_address}: {exc}. Start the embedded stack with "
            f"`bamboo dev up`, or set BAMBOO_TEMPORAL_ADDRESS to your cluster's frontend."
        ) from exc
