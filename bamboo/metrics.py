"""The product's counters (model calls, embedding requests, sandbox runs, tool calls), recorded on the worker
runtime's meter.

A light module on purpose: the sandbox bridge, the LLM client and the toolbox record here without pulling in
the tracing stack. Until a worker binds a Prometheus-serving runtime (``bamboo.telemetry.worker_runtime``)
the counters are no-ops.

Every chat-model call is one ``bamboo_llm_calls`` increment, whatever asked for it: ``kind`` tells a
structured call (a JSON schema, named in ``schema``) from a text call (prose for people; ``schema="none"``),
and ``outcome`` says how it ended (``ok``, ``repaired``, ``invalid``, ``failed``). Embeddings are counted
apart, in ``bamboo_embedding_requests`` (one per request, a batch of texts): they are another model,
another endpoint and another price, and a populate embeds every passage, so among the chat calls they would
swamp them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.common import MetricMeter

NO_SCHEMA = "none"


class _Unbound:
    """A counter before a worker binds the meter: counts nothing. (Not temporalio's no-op meter: importing
    temporalio here would cost every process that opens the store, and so builds an embedder, over half a
    second.)"""

    def add(self, value: int, additional_attributes: Any = None) -> None:
        pass


class Metrics:
    """The product's counters. Bound to the worker runtime's meter; no-ops until then."""

    def __init__(self) -> None:
        self.meter: MetricMeter | None = None
        self._llm: Any = _Unbound()
        self._embed: Any = _Unbound()
        self._sandbox: Any = _Unbound()
        self._tools: Any = _Unbound()

    def bind(self, meter: MetricMeter) -> None:
        self.meter = meter
        self._llm = meter.create_counter("bamboo_llm_calls", "chat-model calls by kind, schema and outcome")
        self._embed = meter.create_counter("bamboo_embedding_requests",
                                           "embedding requests (one per batch of texts) by source and outcome")
        self._sandbox = meter.create_counter("bamboo_sandbox_runs", "sandbox runs by status and isolation")
        self._tools = meter.create_counter("bamboo_tool_calls", "bridged and built-in tool calls by outcome")

    def llm_call(self, schema: str, outcome: str, kind: str = "structured") -> None:
        """One chat-model call: ``kind`` is ``structured`` (``schema`` names its JSON schema) or ``text``."""
        self._llm.add(1, {"kind": kind, "schema": schema, "outcome": outcome})

    def llm_text_call(self, outcome: str) -> None:
        """One free-text chat-model call (no schema)."""
        self.llm_call(NO_SCHEMA, outcome, kind="text")

    def embedding_request(self, source: str, outcome: str) -> None:
        """One embedding request: ``source`` is ``endpoint`` (an OpenAI-compatible server) or ``local``
        (the bundled in-process model)."""
        self._embed.add(1, {"source": source, "outcome": outcome})

    def sandbox_run(self, status: str, isolation: str) -> None:
        self._sandbox.add(1, {"status": status, "isolation": isolation})

    def tool_call(self, tool: str, outcome: str, via: str) -> None:
        self._tools.add(1, {"tool": tool, "outcome": outcome, "via": via})


METRICS = Metrics()
