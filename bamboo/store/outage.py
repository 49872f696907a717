"""Waiting out a database outage instead of failing the work that needed it.

A Postgres restart or a network cut used to fail the store call, then the activity, then — retries
spent — the lane, whose incidents were handed to workflows of their own that failed in turn: a 60 s
outage re-ran most of a batch and a long one marked stored incidents "failed". Every store write is
idempotent (upserts keyed by the incident, audit rows keyed by their subject, in the same
transaction), so the right answer to "the database is not there" is to try the same operation again
a little later, for as long as the deployment is willing to wait, while the activity keeps
heartbeating so Temporal knows the worker is alive.

Only connection-class failures (psycopg's OperationalError family: refused or dropped connections,
the server shutting down or starting up, a pool with no connection to give, deadlocks and
cancellations) are waited out. A statement the database refuses (bad data, a missing privilege, a
constraint) fails at once: waiting would not change the answer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Concatenate, Coroutine, ParamSpec, TypeVar

import psycopg

log = logging.getLogger(__name__)

T = TypeVar("T")


class StoreUnavailable(ConnectionError):
    """The database stayed unreachable for longer than the deployment is willing to wait."""


def is_outage(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.OperationalError)


@dataclass(frozen=True)
class OutagePolicy:
    """How long a store call waits for the database to come back (0: not at all, for the CLI, where
    a person is waiting and a clear error is worth more), and how far apart the attempts grow."""

    wait_s: float = 0.0
    first_backoff_s: float = 0.2
    max_backoff_s: float = 5.0

    async def run(self, op: Callable[[], Awaitable[T]], what: str) -> T:
        started = time.monotonic()
        delay = self.first_backoff_s
        attempts = 0
        while True:
            try:
                result = await op()
            except Exception as exc:
                if not is_outage(exc):
                    raise
                waited = time.monotonic() - started
                if waited + delay > self.wait_s:
                    if not self.wait_s:
                        raise
                    raise StoreUnavailable(
                        f"the knowledge store stayed unreachable for {waited:.0f} s while trying to {what} "
                        f"({_first_line(exc)}); check the database, or raise BAMBOO_STORE_OUTAGE_WAIT_S") from exc
                attempts += 1
                if attempts == 1:
                    log.warning("knowledge store unreachable while trying to %s (%s); waiting up to %.0f s for it",
                                what, _first_line(exc), self.wait_s)
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(self.max_backoff_s, delay * 2)
                continue
            if attempts:
                log.warning("knowledge store reachable again after %.1f s (%d retries to %s)",
                            time.monotonic() - started, attempts, what)
            return result


NO_WAIT = OutagePolicy()


_S = TypeVar("_S")
_P = ParamSpec("_P")


def waits_out_outages(
    what: str,
) -> Callable[
    [Callable[Concatenate[_S, _P], Awaitable[T]]], Callable[Concatenate[_S, _P], Coroutine[Any, Any, T]]
]:
    """Decorate a store method (on an object with an `outage: OutagePolicy`) so the whole method —
    every statement and transaction in it — is tried again while the database is away."""

    def decorate(
        method: Callable[Concatenate[_S, _P], Awaitable[T]],
    ) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, T]]:
        @functools.wraps(method)
        async def wrapper(self: _S, *args: _P.args, **kwargs: _P.kwargs) -> T:
            policy: OutagePolicy = getattr(self, "outage", NO_WAIT)
            return await policy.run(lambda: method(self, *args, **kwargs), what)

        return wrapper

    return decorate


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]
