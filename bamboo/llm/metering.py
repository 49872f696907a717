"""Counting a running activity's model calls: a context variable, so concurrent activities in one worker
never mix their counts. ``LLMClient`` records every completion's usage; ``metered`` prices it."""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from pydantic import BaseModel

from bamboo.models.spend import Budget, PriceTable, Spend

R = TypeVar("R", bound=BaseModel)


class _Meter:
    def __init__(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def add(self, usage: dict[str, Any] | None) -> None:
        self.calls += 1
        usage = usage or {}
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)


_current: ContextVar[_Meter | None] = ContextVar("bamboo_llm_meter", default=None)


def record_usage(usage: dict[str, Any] | None) -> None:
    """Called by the client after every completion; outside a meter it is a no-op."""
    meter = _current.get()
    if meter is not None:
        meter.add(usage)


class Metering:
    """What ``metered`` yields: read ``spend`` after the calls."""

    def __init__(self, meter: _Meter, prices: PriceTable, model: str, budget: Budget) -> None:
        self._meter, self._prices, self._model, self._budget = meter, prices, model, budget

    @property
    def spend(self) -> Spend:
        m = self._meter
        # Without a price the tokens are still counted; settings refuse a budget for a model without one.
        usd = (self._prices.cost(self._model, m.prompt_tokens, m.completion_tokens)
               if self._prices.price(self._model) is not None else 0.0)
        return Spend(calls=m.calls, prompt_tokens=m.prompt_tokens, completion_tokens=m.completion_tokens,
                     usd=round(usd, 6), budget=self._budget)


@contextmanager
def metered(prices: PriceTable, model: str, budget: Budget) -> Iterator[Metering]:
    """Count the model calls made inside (in this task and the tasks it starts)."""
    meter = _Meter()
    token = _current.set(meter)
    try:
        yield Metering(meter, prices, model, budget)
    finally:
        _current.reset(token)


class SpendMeter:
    """The deployment's prices, model and budget, built once by the worker and handed to the activities
    that call the model: ``with meter.metered() as m: ...; result.spend = m.spend``."""

    def __init__(self, prices: PriceTable, model: str, budget: Budget) -> None:
        self.prices, self.model, self.budget = prices, model, budget

    def metered(self):
        return metered(self.prices, self.model, self.budget)

    async def step(self, work: Awaitable[R]) -> R:
        """Await a model step and return its result with ``spend`` set to the calls it made."""
        with self.metered() as metering:
            result = await work
        return result.model_copy(update={"spend": metering.spend})
