"""How an activity reports a model call that failed: the LLM adapter raises its own ``LLMError``s and
this maps them to Temporal's ``ApplicationError`` (type, retryable or not, and the details an operator
reads in Temporal Web). The adapter itself knows nothing of Temporal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from temporalio.exceptions import ApplicationError

from bamboo.llm.errors import LLMError, classify


def to_application_error(exc: BaseException) -> ApplicationError:
    """The Temporal error an activity should raise for `exc` (``raise to_application_error(e) from e``)."""
    error = classify(exc)
    return ApplicationError(
        error.message,
        {"kind": error.kind.value, "endpoint": error.endpoint, "model": error.model, "status_code": error.status_code},
        type=error.error_type,
        non_retryable=not error.retryable,
    )


@contextmanager
def as_activity_error() -> Iterator[None]:
    """Inside it, a failed model call leaves as the matching ``ApplicationError``."""
    try:
        yield
    except LLMError as exc:
        raise to_application_error(exc) from exc
