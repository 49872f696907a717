"""The scripted server's own contract, which the benchmark and other suites rely on."""

from __future__ import annotations

import asyncio
import base64
import struct
import threading

import httpx
import openai
import pytest

from tests.support.scripted_llm import Reply, ScriptedLLMServer, fake_embedding, schema_router


def chat_body(schema_name: str | None = None, user: str = "hi") -> dict:
    body: dict = {"model": "m", "messages": [{"role": "user", "content": user}]}
    if schema_name:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": schema_name, "schema": {}}}
    return body


def test_queue_is_served_before_the_handler_and_calls_are_counted_per_schema():
    with ScriptedLLMServer(lambda req: "from handler", replies=["queued"]) as server:
        with httpx.Client(base_url=server.base_url) as http:
            first = http.post("/chat/completions", json=chat_body("A")).json()
            second = http.post("/chat/completions", json=chat_body("B")).json()
            third = http.post("/chat/completions", json=chat_body("A")).json()
        assert [r["choices"][0]["message"]["content"] for r in (first, second, third)] == [
            "queued", "from handler", "from handler"
        ]
        assert server.counts_by_schema() == {"A": 2, "B": 1}


def test_router_dispatches_on_schema_name_and_rejects_unknown_names():
    router = schema_router({"A": lambda req: {"a": req.user}, None: lambda req: "prose"})
    with ScriptedLLMServer(router) as server, httpx.Client(base_url=server.base_url) as http:
        routed = http.post("/chat/completions", json=chat_body("A", user="x")).json()
        free = http.post("/chat/completions", json=chat_body(None)).json()
        unknown = http.post("/chat/completions", json=chat_body("Z"))
    assert routed["choices"][0]["message"]["content"] == '{"a": "x"}'
    assert free["choices"][0]["message"]["content"] == "prose"
    assert unknown.status_code == 400 and "'Z'" in unknown.json()["error"]["message"]


def test_error_replies_use_the_openai_error_shape_and_handler_crashes_are_reported():
    def crash(request):
        raise KeyError("boom")

    with ScriptedLLMServer(crash, replies=[Reply.error(429, "slow down")]) as server:
        with httpx.Client(base_url=server.base_url) as http:
            limited = http.post("/chat/completions", json=chat_body())
            crashed = http.post("/chat/completions", json=chat_body())
        assert limited.status_code == 429
        assert limited.json() == {"error": {"message": "slow down", "type": "rate_limit_error", "code": None, "param": None}}
        assert crashed.status_code == 500
        assert "KeyError: 'boom'" in server.handler_errors[0]


async def test_latency_does_not_serialise_concurrent_requests():
    with ScriptedLLMServer(lambda req: "ok", latency_s=0.3) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
            replies = await asyncio.gather(*(http.post("/chat/completions", json=chat_body()) for _ in range(32)))
        assert all(r.status_code == 200 for r in replies)
        assert server.call_count == 32
        assert server.max_in_flight >= 8


def test_embeddings_in_float_and_base64_and_models_listing():
    with ScriptedLLMServer(embedding_dim=4, model="fake") as server:
        with httpx.Client(base_url=server.base_url) as http:
            floats = http.post("/embeddings", json={"model": "e", "input": ["x", "y"]}).json()
            packed = http.post("/embeddings", json={"model": "e", "input": "x", "encoding_format": "base64"}).json()
            models = http.get("/models").json()
    assert [d["embedding"] for d in floats["data"]] == [fake_embedding("x", 4), fake_embedding("y", 4)]
    decoded = list(struct.unpack("<4f", base64.b64decode(packed["data"][0]["embedding"])))
    assert decoded == pytest.approx(fake_embedding("x", 4), abs=1e-6)
    assert models["data"][0]["id"] == "fake"


async def test_the_openai_sdk_reads_the_sdk_default_embedding_encoding():
    with ScriptedLLMServer(embedding_dim=8) as server:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as sdk:
            response = await sdk.embeddings.create(model="e", input=["hello"])
    assert response.data[0].embedding == pytest.approx(fake_embedding("hello", 8), abs=1e-6)


def test_fake_embeddings_are_deterministic_unit_vectors_that_differ_by_text():
    a, b = fake_embedding("alpha", 32), fake_embedding("beta", 32)
    assert a == fake_embedding("alpha", 32) and a != b
    assert sum(x * x for x in a) == pytest.approx(1.0)


def test_stop_does_not_wait_for_sleeping_replies():
    server = ScriptedLLMServer(replies=[Reply.delayed(30.0, "late")]).start()
    url = server.base_url

    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(httpx.post(f"{url}/chat/completions", json=chat_body(), timeout=60)))
    worker.start()
    while server.call_count == 0:
        threading.Event().wait(0.01)
    server.stop()
    worker.join(timeout=10)
    assert not worker.is_alive()
