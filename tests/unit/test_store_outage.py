"""The store's wait for a database outage: connection-class failures are tried again with backoff for
as long as the policy allows; a statement the database refuses fails at once."""

from __future__ import annotations

import psycopg
import pytest

from bamboo.store.outage import NO_WAIT, OutagePolicy, StoreUnavailable, waits_out_outages

FAST = OutagePolicy(wait_s=5.0, first_backoff_s=0.01, max_backoff_s=0.05)


class Flaky:
    def __init__(self, failures: list[BaseException], outage: OutagePolicy) -> None:
        self.failures = failures
        self.outage = outage
        self.calls = 0

    @waits_out_outages("do the thing")
    async def op(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


async def test_an_outage_is_waited_out():
    flaky = Flaky([psycopg.OperationalError("connection refused"),
                   psycopg.errors.AdminShutdown("terminating connection due to administrator command")], FAST)
    assert await flaky.op() == "done" and flaky.calls == 3


async def test_a_refused_statement_is_not_retried():
    flaky = Flaky([psycopg.errors.NumericValueOutOfRange("bigint out of range")], FAST)
    with pytest.raises(psycopg.DataError):
        await flaky.op()
    assert flaky.calls == 1


async def test_an_outage_longer_than_the_wait_is_a_clear_error():
    flaky = Flaky([psycopg.OperationalError("down")] * 1000, OutagePolicy(wait_s=0.1, first_backoff_s=0.02))
    with pytest.raises(StoreUnavailable, match="stayed unreachable.*do the thing.*BAMBOO_STORE_OUTAGE_WAIT_S"):
        await flaky.op()


async def test_without_a_wait_the_error_is_immediate():
    flaky = Flaky([psycopg.OperationalError("down")], NO_WAIT)
    with pytest.raises(psycopg.OperationalError):
        await flaky.op()
    assert flaky.calls == 1
