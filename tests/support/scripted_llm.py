"""A real OpenAI-compatible HTTP server on loopback whose answers a test scripts call by call.

The production client (the `openai` SDK inside `bamboo.llm.LLMClient`) talks to it unchanged over
HTTP, so tests exercise the real wire format, timeouts and error mapping; only the model is fake.

Each ``POST /v1/chat/completions`` becomes a `ChatRequest`; the answer is taken from the queue of
canned replies first, else from the handler. A handler returns a `Reply`, a `str` (the message
content) or a `dict` (JSON-encoded as the content). ``POST /v1/embeddings`` answers with
deterministic hash-seeded unit vectors, and ``GET /v1/models`` lists the one scripted model.

An aiohttp server on an event loop of its own thread: a fixed latency delays every call without
serialising them (32 concurrent calls at 100 ms finish in about 100 ms, not 3.2 s), and serving a
call costs a fraction of the CPU a thread per request did — the benchmarks run this server on the
same cores as the system they measure. Handlers run on that loop, so they must not block.

    with ScriptedLLMServer(schema_router({"Diagnosis": lambda req: {"cause": "oom"}})) as llm:
        client = LLMClient(base_url=llm.base_url, model=llm.model)
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import itertools
import json
import struct
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from aiohttp import web


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completion call as the server received it."""

    index: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> str | None:
        return self.body.get("model")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def system(self) -> str:
        return "\n".join(_text(m) for m in self.messages if m.get("role") == "system")

    @property
    def user(self) -> str:
        """The last user message (after a repair turn, the repair instruction)."""
        users = [_text(m) for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""

    @property
    def first_user(self) -> str:
        """The original user prompt, unchanged by repair turns (route on this, not on `user`)."""
        users = [_text(m) for m in self.messages if m.get("role") == "user"]
        return users[0] if users else ""

    @property
    def temperature(self) -> float | None:
        return self.body.get("temperature")

    @property
    def response_format(self) -> dict[str, Any] | None:
        return self.body.get("response_format")

    @property
    def schema_name(self) -> str | None:
        rf = self.response_format or {}
        return (rf.get("json_schema") or {}).get("name") if rf.get("type") == "json_schema" else None

    @property
    def schema(self) -> dict[str, Any] | None:
        rf = self.response_format or {}
        return (rf.get("json_schema") or {}).get("schema") if rf.get("type") == "json_schema" else None

    @property
    def is_repair(self) -> bool:
        """True when the conversation already holds an assistant turn (a repair follow-up)."""
        return any(m.get("role") == "assistant" for m in self.messages)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


@dataclass(frozen=True)
class Reply:
    """What the server does for one call: answer `content`, or fail with `status`, after `delay_s`."""

    content: str | dict[str, Any] | list[Any] | None = None
    status: int = 200
    error_message: str = ""
    error_body: dict[str, Any] | str | None = None
    delay_s: float = 0.0
    finish_reason: str = "stop"

    @classmethod
    def json(cls, value: dict[str, Any] | list[Any], *, delay_s: float = 0.0) -> Reply:
        return cls(content=value, delay_s=delay_s)

    @classmethod
    def text(cls, value: str, *, delay_s: float = 0.0) -> Reply:
        return cls(content=value, delay_s=delay_s)

    @classmethod
    def error(cls, status: int, message: str = "scripted failure", *, body: dict[str, Any] | str | None = None,
              delay_s: float = 0.0) -> Reply:
        return cls(status=status, error_message=message, error_body=body, delay_s=delay_s)

    @classmethod
    def delayed(cls, delay_s: float, content: str | dict[str, Any] | None = None) -> Reply:
        return cls(content=content if content is not None else {}, delay_s=delay_s)

    def encoded_content(self) -> str | None:
        if self.content is None or isinstance(self.content, str):
            return self.content
        return json.dumps(self.content)


Handler = Callable[[ChatRequest], "Reply | str | dict[str, Any]"]


def _as_reply(value: Reply | str | dict[str, Any] | list[Any]) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, (str, dict, list)):
        return Reply(content=value)
    raise TypeError(f"a scripted handler returned {type(value).__name__}; return a Reply, str or dict")


def schema_router(routes: dict[str | None, Handler], default: Handler | None = None) -> Handler:
    """A handler that dispatches on the requested JSON-schema name (`None` key: free-text calls)."""

    def route(request: ChatRequest) -> Reply | str | dict[str, Any]:
        handler = routes.get(request.schema_name, default)
        if handler is None:
            known = ", ".join(sorted(str(name) for name in routes))
            return Reply.error(400, f"scripted server has no route for schema {request.schema_name!r} (routes: {known})")
        return handler(request)

    return route


def fake_embedding(text: str, dim: int) -> list[float]:
    """A deterministic unit vector for `text` (equal texts, equal vectors; in any process)."""
    return list(_fake_vector(text, dim))


@functools.lru_cache(maxsize=65536)
def _fake_vector(text: str, dim: int) -> tuple[float, ...]:
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    # numpy, not a Python loop, and cached: benchmarks embed thousands of (often repeated) texts and
    # the server shares their CPU.
    vector = np.random.default_rng(seed).standard_normal(dim)
    return tuple((vector / (np.linalg.norm(vector) or 1.0)).tolist())


@functools.lru_cache(maxsize=65536)
def _fake_vector_base64(text: str, dim: int) -> str:
    return base64.b64encode(struct.pack(f"<{dim}f", *_fake_vector(text, dim))).decode()


class ScriptedLLMServer:
    """Loopback OpenAI-compatible server; start with `start()` or as a context manager."""

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        replies: Iterable[Reply | str | dict[str, Any]] = (),
        latency_s: float = 0.0,
        embedding_dim: int = 384,
        model: str = "scripted",
    ) -> None:
        self.handler = handler
        self.latency_s = latency_s
        self.embedding_dim = embedding_dim
        self.model = model
        self._queue: deque[Reply] = deque(_as_reply(r) for r in replies)
        self._lock = threading.Lock()
        self._calls: list[ChatRequest] = []
        self._embedding_inputs: list[list[str]] = []
        self._handler_errors: list[str] = []
        self._counter = itertools.count()
        self._in_flight = 0
        self.max_in_flight = 0
        self._chats_in_flight = 0
        self.max_chats_in_flight = 0  # chat completions only, without embedding requests
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._wake: asyncio.Event | None = None  # set on stop: replies still sleeping out a delay answer now
        self._port: int | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> ScriptedLLMServer:
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._serve, args=(ready, failure), name="scripted-llm", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure or self._port is None:
            self._thread = None
            raise RuntimeError(f"the scripted LLM server did not start: {failure[0] if failure else 'timed out'}")
        return self

    def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._open())
        except BaseException as exc:  # reported by start()
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _open(self) -> None:
        self._wake = asyncio.Event()
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._route)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        # The default backlog drops bursts of concurrent connects.
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=256)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def _close(self) -> None:
        assert self._wake is not None and self._runner is not None
        self._wake.set()
        await self._runner.cleanup()

    def stop(self) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        self._thread = None
        try:
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            self._port = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the scripted LLM server is not running; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ----------------------------------------------------------------------------
    def enqueue(self, *replies: Reply | str | dict[str, Any]) -> None:
        with self._lock:
            self._queue.extend(_as_reply(r) for r in replies)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._calls.clear()
            self._embedding_inputs.clear()
            self._handler_errors.clear()
            self.max_in_flight = 0
            self.max_chats_in_flight = 0

    # --- call log -----------------------------------------------------------------------------
    @property
    def calls(self) -> list[ChatRequest]:
        with self._lock:
            return list(self._calls)

    @property
    def call_count(self) -> int:
        with self._lock:
            return len(self._calls)

    def counts_by_schema(self) -> dict[str | None, int]:
        with self._lock:
            return dict(Counter(call.schema_name for call in self._calls))

    @property
    def embedding_inputs(self) -> list[list[str]]:
        with self._lock:
            return [list(batch) for batch in self._embedding_inputs]

    @property
    def handler_errors(self) -> list[str]:
        """Tracebacks of handler exceptions (each also answered as HTTP 500)."""
        with self._lock:
            return list(self._handler_errors)

    # --- request handling (server threads) ------------------------------------------------------
    def _next_reply(self, request: ChatRequest) -> Reply:
        with self._lock:
            self._calls.append(request)
            queued = self._queue.popleft() if self._queue else None
        if queued is not None:
            return queued
        if self.handler is None:
            return Reply.error(500, "scripted server: no queued reply and no handler for this call")
        try:
            return _as_reply(self.handler(request))
        except Exception:
            with self._lock:
                self._handler_errors.append(traceback.format_exc())
            return Reply.error(500, "scripted handler raised; see ScriptedLLMServer.handler_errors")

    def _enter(self, chat: bool) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            self._chats_in_flight += chat
            self.max_chats_in_flight = max(self.max_chats_in_flight, self._chats_in_flight)

    def _leave(self, chat: bool) -> None:
        with self._lock:
            self._in_flight -= 1
            self._chats_in_flight -= chat

    async def _sleep(self, seconds: float) -> None:
        if seconds > 0 and self._wake is not None and not self._wake.is_set():
            try:
                await asyncio.wait_for(self._wake.wait(), seconds)
            except asyncio.TimeoutError:
                pass

    async def chat(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        request = ChatRequest(index=next(self._counter), body=body, headers=headers or {})
        reply = self._next_reply(request)
        await self._sleep(self.latency_s + reply.delay_s)
        if reply.status != 200:
            return reply.status, _error_payload(reply)
        content = reply.encoded_content()
        prompt_tokens = sum(len(_text(m).split()) for m in request.messages)
        completion_tokens = len((content or "").split())
        return 200, {
            "id": f"chatcmpl-scripted-{request.index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": reply.finish_reason,
                "logprobs": None,
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    async def embeddings(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else list(raw or [])
        if not all(isinstance(t, str) for t in texts):
            return 400, {"error": {"message": "input must be a string or a list of strings", "type": "invalid_request_error"}}
        with self._lock:
            self._embedding_inputs.append(texts)
        await self._sleep(self.latency_s)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            encoded: Any = (_fake_vector_base64(text, self.embedding_dim) if as_base64
                            else fake_embedding(text, self.embedding_dim))
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(t.split()) for t in texts)
        return 200, {"object": "list", "data": data, "model": body.get("model") or self.model,
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def models(self) -> tuple[int, dict[str, Any]]:
        return 200, {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "tests"}]}

    # --- HTTP (the server's event loop) ---------------------------------------------------------
    async def _route(self, request: web.Request) -> web.Response:
        path = request.path.rstrip("/")
        if request.method == "GET":
            if path.endswith("/models"):
                return _respond(*self.models())
            return _respond(404, {"error": {"message": f"no route {request.path}", "type": "not_found_error"}})
        if request.method != "POST":
            return _respond(405, {"error": {"message": f"{request.method} is not served", "type": "invalid_request_error"}})
        raw = await request.read()
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            return _respond(400, {"error": {"message": f"request body is not JSON: {exc}", "type": "invalid_request_error"}})
        chat = path.endswith("/chat/completions")
        self._enter(chat)
        try:
            if chat:
                return _respond(*await self.chat(body, {name.lower(): value for name, value in request.headers.items()}))
            if path.endswith("/embeddings"):
                return _respond(*await self.embeddings(body))
            return _respond(404, {"error": {"message": f"no route {request.path}", "type": "not_found_error"}})
        finally:
            self._leave(chat)


def _error_payload(reply: Reply) -> dict[str, Any]:
    if isinstance(reply.error_body, dict):
        return reply.error_body
    message = reply.error_body if isinstance(reply.error_body, str) else reply.error_message
    kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
            404: "not_found_error", 429: "rate_limit_error"}.get(reply.status, "server_error")
    return {"error": {"message": message, "type": kind, "code": None, "param": None}}


def _respond(status: int, payload: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=json.dumps(payload).encode(), content_type="application/json")


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLMServer]:
    """A running `ScriptedLLMServer` with no script; set `.handler` or `enqueue()` replies in the test.

    Import it into a conftest (``from tests.support.scripted_llm import scripted_llm``) to use it.
    """
    with ScriptedLLMServer() as server:
        yield server
