"""Classification of failures that reach `to_application_error` without going through LLMClient."""

from __future__ import annotations

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from bamboo.llm.errors import FailureKind, LLMRequestError, classify, is_retryable
from activities.llm_errors import to_application_error
from bamboo.llm.errors import EMBEDDING_SETTINGS_PREFIX

REQUEST = httpx.Request("POST", "http://llm.example/v1/chat/completions")


def status_error(status: int) -> httpx.HTTPStatusError:
    response = httpx.Response(status, request=REQUEST, text="upstream says no")
    return httpx.HTTPStatusError("failed", request=REQUEST, response=response)


@pytest.mark.parametrize(
    ("exc", "kind", "retryable"),
    [
        (httpx.ReadTimeout("slow", request=REQUEST), FailureKind.TIMEOUT, True),
        (TimeoutError(), FailureKind.TIMEOUT, True),
        (httpx.ConnectError("refused", request=REQUEST), FailureKind.CONNECTION, True),
        (ConnectionRefusedError(), FailureKind.CONNECTION, True),
        (status_error(429), FailureKind.RATE_LIMITED, True),
        (status_error(502), FailureKind.SERVER_ERROR, True),
        (status_error(408), FailureKind.SERVER_ERROR, True),
        (status_error(401), FailureKind.AUTH, False),
        (status_error(403), FailureKind.FORBIDDEN, False),
        (status_error(404), FailureKind.MODEL_NOT_FOUND, False),
        (status_error(400), FailureKind.BAD_REQUEST, False),
        (status_error(422), FailureKind.BAD_REQUEST, False),
        (status_error(418), FailureKind.BAD_REQUEST, False),
        (RuntimeError("surprise"), FailureKind.UNEXPECTED, True),
    ],
)
def test_classification(exc, kind, retryable):
    error = classify(exc, endpoint="http://llm.example/v1", model="m")
    assert error.kind == kind
    assert error.retryable is retryable
    assert is_retryable(exc) is retryable
    app = to_application_error(exc)
    assert isinstance(app, ApplicationError)
    assert app.non_retryable is (not retryable)


def test_application_error_carries_type_and_details():
    app = to_application_error(classify(status_error(401), endpoint="http://llm.example/v1", model="gpt-x"))
    assert app.type == "LLMAuth"
    assert app.details == ({"kind": "auth", "endpoint": "http://llm.example/v1", "model": "gpt-x", "status_code": 401},)
    assert "upstream says no" in app.message


def test_embedding_failures_name_the_embedding_settings():
    error = classify(status_error(401), endpoint="http://emb.example/v1", settings_prefix=EMBEDDING_SETTINGS_PREFIX)
    assert "BAMBOO_EMBEDDING_API_KEY" in error.message and "BAMBOO_LLM" not in error.message


def test_already_classified_errors_pass_through_unchanged():
    error = LLMRequestError("x", kind=FailureKind.AUTH)
    assert classify(error) is error
