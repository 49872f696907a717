"""LLMClient against a real HTTP server speaking the OpenAI wire format."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pydantic import BaseModel, Field

from bamboo.llm.client import LLMClient
from bamboo.llm.errors import FailureKind, LLMOutputError, LLMRequestError
from activities.llm_errors import to_application_error
from bamboo.settings import Settings
from tests.support.scripted_llm import ChatRequest, Reply, ScriptedLLMServer, schema_router


class Step(BaseModel):
    order: int
    action: str


class Diagnosis(BaseModel):
    cause: str
    confidence: float = Field(ge=0.0, le=1.0)
    steps: list[Step]
    note: str | None = None


GOOD = {"cause": "payload exceeded memory", "confidence": 0.8, "steps": [{"order": 1, "action": "raise ramCount"}], "note": None}


async def ask(client: LLMClient, **kwargs: object) -> Diagnosis:
    return await client.structured(system="You diagnose PanDA tasks.", user="Task 1 failed.", output=Diagnosis, **kwargs)


async def test_valid_reply_is_returned_as_the_model_and_the_schema_is_sent_strict(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue(GOOD)

    result = await ask(client)

    assert result == Diagnosis.model_validate(GOOD)
    (call,) = scripted_llm.calls
    assert call.model == "scripted-model"
    assert call.system == "You diagnose PanDA tasks."
    assert call.user == "Task 1 failed."
    assert call.temperature == 0.0
    assert call.response_format["type"] == "json_schema"
    assert call.response_format["json_schema"]["strict"] is True
    assert call.schema_name == "Diagnosis"
    assert call.schema["additionalProperties"] is False
    assert sorted(call.schema["required"]) == ["cause", "confidence", "note", "steps"]


async def test_schema_name_can_be_chosen_and_is_made_api_safe(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue(GOOD)
    await ask(client, name="root cause/v2")
    assert scripted_llm.calls[0].schema_name == "root_cause_v2"


async def test_invalid_reply_gets_one_repair_turn_quoting_the_error(client, scripted_llm: ScriptedLLMServer):
    bad = {"cause": "memory", "confidence": 7, "steps": []}
    scripted_llm.enqueue(bad, GOOD)

    result = await ask(client)

    assert result.cause == GOOD["cause"]
    first, repair = scripted_llm.calls
    assert not first.is_repair and repair.is_repair
    assert repair.messages[2] == {"role": "assistant", "content": '{"cause": "memory", "confidence": 7, "steps": []}'}
    assert "confidence" in repair.user and "less than or equal to 1" in repair.user
    assert repair.first_user == "Task 1 failed."
    assert repair.schema_name == "Diagnosis"


async def test_reply_that_is_not_json_is_repaired(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue("The cause is memory.", GOOD)
    assert (await ask(client)).confidence == 0.8
    assert "Invalid JSON" in scripted_llm.calls[1].user


async def test_a_single_markdown_fence_is_tolerated_without_repair(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue('```json\n{"cause": "x", "confidence": 0.1, "steps": []}\n```')
    assert (await ask(client)).cause == "x"
    assert scripted_llm.call_count == 1


async def test_second_invalid_reply_raises_llm_output_error(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue({"cause": 3}, "still not json")

    with pytest.raises(LLMOutputError) as caught:
        await ask(client)

    assert scripted_llm.call_count == 2
    error = caught.value
    assert error.schema_name == "Diagnosis"
    assert error.last_reply == "still not json"
    assert "Invalid JSON" in error.validation_error
    app_error = to_application_error(error)
    assert app_error.non_retryable and app_error.type == "LLMInvalidOutput"


async def test_a_reply_cut_off_at_the_token_limit_is_named_in_the_repair(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue(Reply(content='{"cause": "mem', finish_reason="length"), GOOD)
    await ask(client)
    assert "cut off at the token limit" in scripted_llm.calls[1].user


async def test_empty_content_counts_as_invalid_output(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue(Reply(content=None), Reply(content=""))
    with pytest.raises(LLMOutputError, match="empty"):
        await ask(client)


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_rate_limit_and_server_errors_are_retryable_and_not_retried_by_the_sdk(client, scripted_llm, status):
    scripted_llm.enqueue(Reply.error(status, "busy"))

    with pytest.raises(LLMRequestError) as caught:
        await ask(client)

    assert scripted_llm.call_count == 1  # max_retries=0: Temporal owns retries
    assert caught.value.retryable and caught.value.status_code == status
    app_error = to_application_error(caught.value)
    assert app_error.non_retryable is False


async def test_auth_failure_is_non_retryable_and_names_the_setting(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue(Reply.error(401, "Incorrect API key provided"))

    with pytest.raises(LLMRequestError) as caught:
        await ask(client)

    app_error = to_application_error(caught.value)
    assert app_error.non_retryable is True
    assert app_error.type == "LLMAuth"
    assert "BAMBOO_LLM_API_KEY" in app_error.message
    assert "Incorrect API key provided" in app_error.message
    assert scripted_llm.call_count == 1


@pytest.mark.parametrize(
    ("status", "kind", "hint"),
    [
        (403, FailureKind.FORBIDDEN, "BAMBOO_LLM_API_KEY"),
        (404, FailureKind.MODEL_NOT_FOUND, "BAMBOO_LLM_MODEL"),
        (400, FailureKind.BAD_REQUEST, "structured output"),
        (422, FailureKind.BAD_REQUEST, "retrying will not help"),
    ],
)
async def test_client_errors_are_non_retryable(client, scripted_llm, status, kind, hint):
    scripted_llm.enqueue(Reply.error(status, "nope"))
    with pytest.raises(LLMRequestError) as caught:
        await ask(client)
    assert caught.value.kind == kind and not caught.value.retryable
    assert hint in str(caught.value)
    assert to_application_error(caught.value).non_retryable is True


async def test_timeout_is_retryable(scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue(Reply.delayed(5.0, GOOD))
    async with LLMClient(base_url=scripted_llm.base_url, model="m", timeout_s=0.3) as slow:
        with pytest.raises(LLMRequestError) as caught:
            await ask(slow)
    assert caught.value.kind == FailureKind.TIMEOUT and caught.value.retryable
    assert "BAMBOO_LLM_TIMEOUT_S" in str(caught.value)
    assert to_application_error(caught.value).non_retryable is False


async def test_unreachable_endpoint_is_a_retryable_connection_error():
    with ScriptedLLMServer() as gone:
        url = gone.base_url  # a port that was just released: nothing listens there any more
    async with LLMClient(base_url=url, model="m", timeout_s=5.0) as llm:
        with pytest.raises(LLMRequestError) as caught:
            await ask(llm)
    assert caught.value.kind == FailureKind.CONNECTION and caught.value.retryable
    assert "BAMBOO_LLM_BASE_URL" in str(caught.value)


async def test_concurrent_calls_are_served_in_parallel_and_each_gets_its_own_answer():
    def answer(request: ChatRequest) -> dict:
        return {"cause": request.user, "confidence": 0.5, "steps": []}

    with ScriptedLLMServer(schema_router({"Diagnosis": answer}), latency_s=0.5) as server:
        async with LLMClient(base_url=server.base_url, model="m", timeout_s=30.0) as llm:
            results = await asyncio.gather(
                *(llm.structured(system="s", user=f"task {i}", output=Diagnosis) for i in range(32))
            )
    assert [r.cause for r in results] == [f"task {i}" for i in range(32)]
    assert server.counts_by_schema() == {"Diagnosis": 32}
    assert server.max_in_flight >= 8


async def test_text_sends_no_response_format(client, scripted_llm: ScriptedLLMServer):
    scripted_llm.enqueue(Reply.text("Dear shifter, the task ran out of memory."))
    assert await client.text(system="Write an e-mail.", user="task 1") == "Dear shifter, the task ran out of memory."
    assert scripted_llm.calls[0].response_format is None
    assert scripted_llm.counts_by_schema() == {None: 1}


async def test_from_settings_uses_endpoint_model_key_and_an_injected_http_client(scripted_llm: ScriptedLLMServer):
    requested: list[str] = []

    async def remember(request: httpx.Request) -> None:
        requested.append(str(request.url))

    scripted_llm.enqueue(Reply.text("hi"))
    settings = Settings(_env_file=None, llm_base_url=scripted_llm.base_url, llm_model="gpt-test", llm_api_key="sk-test")
    http = httpx.AsyncClient(event_hooks={"request": [remember]})
    async with LLMClient.from_settings(settings, http_client=http) as llm:
        assert await llm.text(system="s", user="u") == "hi"
    assert requested == [f"{scripted_llm.base_url}/chat/completions"]
    (call,) = scripted_llm.calls
    assert call.model == "gpt-test"
    assert call.headers["authorization"] == "Bearer sk-test"


async def test_an_injected_transport_is_used(scripted_llm: ScriptedLLMServer):
    class CountingTransport(httpx.AsyncHTTPTransport):
        requests = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            CountingTransport.requests += 1
            return await super().handle_async_request(request)

    scripted_llm.enqueue(GOOD)
    async with LLMClient(base_url=scripted_llm.base_url, model="m", transport=CountingTransport()) as llm:
        assert (await ask(llm)).cause == GOOD["cause"]
    assert CountingTransport.requests == 1


def test_from_settings_without_endpoint_targets_the_local_server_port():
    settings = Settings(_env_file=None, llm_base_url=None, llm_local_port=9911)
    assert LLMClient.from_settings(settings).base_url == "http://127.0.0.1:9911/v1"
