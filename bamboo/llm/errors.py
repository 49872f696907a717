"""Typed failures of model endpoints (chat and embeddings) and how Temporal should treat them.

Temporal owns retries: an activity that raises a retryable error is attempted again under its retry
policy, so the SDK's own retry loop is disabled and every failure is classified exactly once here.
Transient trouble (timeouts, refused connections, rate limits, server errors) is retryable; a wrong
key, a wrong model name or a request the endpoint cannot understand will fail the same way on every
attempt, so it is raised as a non-retryable application error whose message tells the operator
which setting to fix. The mapping to Temporal's own error type is the activities' (`activities/llm_errors.py`):
this adapter knows nothing of Temporal.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:  # imported where an error is classified: a process that only embeds locally never loads it
    import openai

#: Settings prefixes, so a message names the exact environment variable to change.
LLM_SETTINGS_PREFIX = "BAMBOO_LLM"
EMBEDDING_SETTINGS_PREFIX = "BAMBOO_EMBEDDING"


class FailureKind(StrEnum):
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    AUTH = "auth"
    FORBIDDEN = "forbidden"
    BAD_REQUEST = "bad_request"
    MODEL_NOT_FOUND = "model_not_found"
    CONTEXT_OVERFLOW = "context_overflow"
    INVALID_OUTPUT = "invalid_output"
    MISCONFIGURED = "misconfigured"
    UNEXPECTED = "unexpected"


_RETRYABLE_KINDS = frozenset(
    {FailureKind.TIMEOUT, FailureKind.CONNECTION, FailureKind.RATE_LIMITED, FailureKind.SERVER_ERROR, FailureKind.UNEXPECTED}
)


class LLMError(Exception):
    """A model endpoint call that failed; `str()` is a message meant for the operator."""

    def __init__(
        self,
        message: str,
        *,
        kind: FailureKind,
        endpoint: str | None = None,
        model: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.endpoint = endpoint
        self.model = model
        self.status_code = status_code

    @property
    def retryable(self) -> bool:
        return self.kind in _RETRYABLE_KINDS

    @property
    def error_type(self) -> str:
        """The Temporal application-error type, usable in `non_retryable_error_types`."""
        return "LLM" + "".join(part.capitalize() for part in self.kind.value.split("_"))


class LLMRequestError(LLMError):
    """The endpoint could not be reached or answered with an HTTP error."""


class LLMOutputError(LLMError):
    """The model answered, but twice (first try and one repair) not with what the schema demands.

    Non-retryable: the repair already gave the model the validation error, and repeating the same
    prompt against the same model rarely helps; callers that can live without the answer (the
    reviewer, for one) catch this and record it instead.
    """

    def __init__(self, *, schema_name: str, validation_error: str, last_reply: str | None, endpoint: str | None, model: str | None) -> None:
        excerpt = (last_reply or "")[:500]
        message = (
            f"The model {model!r} at {endpoint} did not produce output matching schema {schema_name!r} "
            f"after one repair attempt: {validation_error}. Last reply (first 500 characters): {excerpt!r}. "
            f"Point {LLM_SETTINGS_PREFIX}_BASE_URL and {LLM_SETTINGS_PREFIX}_MODEL at a more capable model."
        )
        super().__init__(message, kind=FailureKind.INVALID_OUTPUT, endpoint=endpoint, model=model)
        self.schema_name = schema_name
        self.validation_error = validation_error
        self.last_reply = last_reply


def classify(
    exc: BaseException,
    *,
    endpoint: str | None = None,
    model: str | None = None,
    timeout_s: float | None = None,
    settings_prefix: str = LLM_SETTINGS_PREFIX,
) -> LLMError:
    """Turn whatever a model call raised into a typed `LLMError` with an actionable message."""
    if isinstance(exc, LLMError):
        return exc
    import openai  # noqa: PLC0415 — the SDK takes about a second to import; see the module's imports

    where = endpoint or "the configured endpoint"
    p = settings_prefix
    if isinstance(exc, (openai.APITimeoutError, httpx.TimeoutException, TimeoutError)) and not _refused(exc):
        limit = f"within {timeout_s:g} s " if timeout_s is not None else ""
        return LLMRequestError(
            f"{where} did not answer {limit}(model {model!r}); the call will be retried."
            + (f" If the model is simply slow, raise {p}_TIMEOUT_S." if p == LLM_SETTINGS_PREFIX else ""),
            kind=FailureKind.TIMEOUT, endpoint=endpoint, model=model,
        )
    if isinstance(exc, (openai.APIConnectionError, httpx.TransportError, ConnectionError)) or _refused(exc):
        return LLMRequestError(
            f"Cannot connect to {where}: {_root_message(exc)}; the call will be retried. "
            f"Check that the server runs and that {p}_BASE_URL is right.",
            kind=FailureKind.CONNECTION, endpoint=endpoint, model=model,
        )
    if isinstance(exc, openai.APIStatusError):
        return _classify_status(exc.status_code, _server_message(exc), endpoint=endpoint, model=model, settings_prefix=p)
    if isinstance(exc, httpx.HTTPStatusError):
        return _classify_status(
            exc.response.status_code, exc.response.text[:300], endpoint=endpoint, model=model, settings_prefix=p
        )
    return LLMRequestError(
        f"Unexpected failure calling {where} (model {model!r}): {type(exc).__name__}: {exc}",
        kind=FailureKind.UNEXPECTED, endpoint=endpoint, model=model,
    )


def _refused(exc: BaseException) -> bool:
    """The aiohttp transport reports a refused connection as a connect *timeout*; the operator's fix
    differs (start the server, fix the URL), so look at the cause chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "Connect call failed" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _classify_status(
    status: int, detail: str, *, endpoint: str | None, model: str | None, settings_prefix: str
) -> LLMRequestError:
    p = settings_prefix
    where = endpoint or "the configured endpoint"
    said = f" The server said: {detail}" if detail else ""
    if status == 401:
        kind, text = FailureKind.AUTH, f"{where} rejected the API key (HTTP 401): set {p}_API_KEY to a valid key."
    elif status == 403:
        kind, text = FailureKind.FORBIDDEN, (
            f"{where} refused access (HTTP 403): check that the key in {p}_API_KEY may use model {model!r}."
        )
    elif status == 404:
        kind, text = FailureKind.MODEL_NOT_FOUND, (
            f"{where} does not know model {model!r} or the path (HTTP 404): set {p}_MODEL to a model the "
            f"endpoint serves (GET /v1/models lists them) and check that {p}_BASE_URL ends with the API root, e.g. /v1."
        )
    elif status in (400, 413, 422) and _is_context_overflow(detail):
        kind, text = FailureKind.CONTEXT_OVERFLOW, (
            f"The prompt does not fit model {model!r}'s context window at {where} (HTTP {status}); retrying will "
            f"not help. Leave {p}_CONTEXT_WINDOW at 0 so the served window is used, or set it to the window the "
            "server gives each request, or lower BAMBOO_TOOL_MAX_FULL_SCHEMAS."
        )
    elif status in (400, 422):
        kind, text = FailureKind.BAD_REQUEST, f"{where} rejected the request as invalid (HTTP {status}); retrying will not help."
        if p == LLM_SETTINGS_PREFIX:
            text += f" Check that model {model!r} supports JSON-schema structured output."
    elif status == 429:
        kind, text = FailureKind.RATE_LIMITED, f"{where} is rate limiting (HTTP 429); the call will be retried."
        if p == LLM_SETTINGS_PREFIX:
            text += f" Lower {p}_CONCURRENCY if this persists."
    elif status >= 500 or status in (408, 409):
        kind, text = FailureKind.SERVER_ERROR, f"{where} failed with HTTP {status}; the call will be retried."
    else:
        kind, text = FailureKind.BAD_REQUEST, f"{where} answered HTTP {status}; retrying will not help."
    return LLMRequestError(text + said, kind=kind, endpoint=endpoint, model=model, status_code=status)


_OVERFLOW_WORDS = ("exceeds the available context", "context length", "context_length", "context window",
                   "maximum context", "exceed_context_size", "too many tokens")


def _is_context_overflow(detail: str) -> bool:
    """llama.cpp: "request (N tokens) exceeds the available context size"; OpenAI and vLLM: "maximum context
    length"; the fix is the window setting, not the model's structured-output support."""
    lowered = detail.lower()
    return any(word in lowered for word in _OVERFLOW_WORDS)


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"][:300]
    return str(exc.message)[:300]


def _root_message(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def is_retryable(exc: BaseException) -> bool:
    return classify(exc).retryable
