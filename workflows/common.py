"""What every workflow shares: the search-attribute keys UIs query by, the heartbeat that lets a dead
worker's activity be retried within seconds, and the retry policies for LLM- and store-bound work."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy, SearchAttributeKey

TASK_ID = SearchAttributeKey.for_int("BambooTaskId")
KIND = SearchAttributeKey.for_keyword("BambooKind")
BATCH = SearchAttributeKey.for_keyword("BambooBatchId")
AWAITING = SearchAttributeKey.for_bool("BambooAwaitingApproval")

# A dead worker's activity is retried after this long, not after its start-to-close timeout.
HEARTBEAT = timedelta(seconds=10)

LLM_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                        maximum_interval=timedelta(seconds=30), maximum_attempts=6)
STORE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10),
                          maximum_attempts=10)
