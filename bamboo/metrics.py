"""The product's counters (LLM calls, sandbox runs, tool calls), recorded on the worker runtime's meter.

A light module on purpose: the sandbox bridge, the LLM client and the toolbox record here without pulling in
the tracing stack. Until a worker binds a Prometheus-serving runtime (``bamboo.telemetry.worker_runtime``)
the counters are no-ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.common import MetricMeter


@dataclass
class Metrics:
    """The product's counters. Bound to the worker runtime's meter; no-ops until then."""

    meter: MetricMeter = MetricMeter.noop

    def bind(self, meter: MetricMeter) -> None:
        self.meter = meter
        self._llm = meter.create_counter("bamboo_llm_calls", "LLM calls by schema and outcome")
        self._sandbox = meter.create_counter("bamboo_sandbox_runs", "sandbox runs by status and isolation")
        self._tools = meter.create_counter("bamboo_tool_calls", "bridged and built-in tool calls by outcome")

    def __post_init__(self) -> None:
        self.bind(self.meter)

    def llm_call(self, schema: str, outcome: str) -> None:
        self._llm.add(1, {"schema": schema, "outcome": outcome})

    def sandbox_run(self, status: str, isolation: str) -> None:
        self._sandbox.add(1, {"status": status, "isolation": isolation})

    def tool_call(self, tool: str, outcome: str, via: str) -> None:
        self._tools.add(1, {"tool": tool, "outcome": outcome, "via": via})


METRICS = Metrics()
