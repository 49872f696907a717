"""The one way the project talks to a chat model: structured answers validated against pydantic models.

Every structured call sends the model's JSON schema as an OpenAI ``json_schema`` response format, so
the endpoint constrains decoding (llama.cpp compiles it into a grammar) and the reply needs no fence
stripping or key guessing at the call site. The reply is validated by pydantic; if it does not hold,
the model gets exactly one repair turn that quotes the validation error, and a second failure raises
`LLMOutputError` rather than degrading to an empty default the way ad-hoc parsers do.

Retries of transport failures belong to Temporal, so the SDK's retry loop is off (``max_retries=0``)
and every failure leaves here as a classified `LLMError` (see `bamboo.llm.errors`).

Every call is counted in ``bamboo_llm_calls`` (``bamboo.metrics``), structured and text alike, failures
included: ``kind`` tells them apart. A structured call counts once, with its outcome, even when its repair
turn made it two requests.
"""

from __future__ import annotations

import functools
import json
from typing import Any, TypeVar

import httpx
import openai
from opentelemetry import trace
from pydantic import BaseModel, ValidationError

from bamboo.llm.errors import LLMError, LLMOutputError, classify
from bamboo.metrics import METRICS
from bamboo.llm.schema import schema_name_for, strict_json_schema
from bamboo.llm.metering import record_usage
from bamboo.settings import Settings

T = TypeVar("T", bound=BaseModel)

_tracer = trace.get_tracer("bamboo.llm")

REPAIR_INSTRUCTION = (
    "Your previous reply does not conform to the required JSON schema {name!r}. Validation error:\n"
    "{error}\n"
    "Reply again with only a single JSON object that conforms to the schema."
)


def default_http_client() -> Any:
    """The SDK's aiohttp transport when installed (it is a dependency): with dozens of calls in
    flight it costs about half the CPU per call of the default HTTPX pool (measured in the populate
    benchmark, where that cost decides throughput). None lets the SDK pick its default."""
    try:
        return openai.DefaultAioHttpClient()
    except RuntimeError:  # the aiohttp extra is missing: the SDK's default pool works, only slower
        return None


def local_base_url(settings: Settings) -> str:
    """Where the local offline model server listens when no endpoint is configured."""
    return f"http://127.0.0.1:{settings.llm_local_port}/v1"


class LLMClient:
    """An OpenAI-compatible chat endpoint, used concurrently from many activities of one worker."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "not-needed",
        timeout_s: float = 120.0,
        max_tokens: int | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if http_client is not None and transport is not None:
            raise ValueError("pass either http_client or transport, not both")
        if transport is not None:
            http_client = httpx.AsyncClient(transport=transport, timeout=timeout_s)
        self.base_url = base_url.rstrip("/")
        http_client = http_client or default_http_client()
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self._openai = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or "not-needed",
            timeout=timeout_s,
            max_retries=0,
            http_client=http_client,  # type: ignore[arg-type]  # openai accepts a legacy httpx client at runtime; its stub names httpx2 only
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        base_url: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> LLMClient:
        """A client for the configured endpoint; without one, for the local server's address.

        The local server itself is started by `bamboo.llm.local.resolve_llm_endpoint` (the worker
        does that at start-up); pass its result as `base_url` to be explicit.
        """
        return cls(
            base_url=base_url or settings.llm_base_url or local_base_url(settings),
            model=settings.llm_model,
            api_key=settings.llm_api_key.get_secret_value(),
            timeout_s=settings.llm_timeout_s,
            max_tokens=settings.llm_max_tokens,
            http_client=http_client,
            transport=transport,
        )

    async def structured(
        self,
        *,
        system: str,
        user: str,
        output: type[T],
        temperature: float = 0.0,
        name: str | None = None,
    ) -> T:
        """Ask for an instance of `output`; one repair turn on invalid output, then `LLMOutputError`."""
        schema_name = schema_name_for(output, name)
        response_format = _response_format(output, schema_name)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        with _tracer.start_as_current_span("llm.structured") as span:
            span.set_attribute("llm.model", self.model)
            span.set_attribute("llm.schema", schema_name)
            span.set_attribute("llm.attempts", 1)
            try:
                reply, finish = await self._complete(messages, temperature=temperature, response_format=response_format)
            except LLMError:
                METRICS.llm_call(schema_name, "failed")
                raise
            try:
                parsed = _parse(reply, output)
                METRICS.llm_call(schema_name, "ok")
                return parsed
            except ValueError as first_error:
                error_text = _describe(first_error, finish)
            span.add_event("llm.repair", {"error": error_text[:1000]})
            span.set_attribute("llm.attempts", 2)
            messages += [
                {"role": "assistant", "content": reply or ""},
                {"role": "user", "content": REPAIR_INSTRUCTION.format(name=schema_name, error=error_text)},
            ]
            try:
                reply, finish = await self._complete(messages, temperature=temperature, response_format=response_format)
            except LLMError:
                METRICS.llm_call(schema_name, "failed")
                raise
            try:
                parsed = _parse(reply, output)
                METRICS.llm_call(schema_name, "repaired")
                return parsed
            except ValueError as second_error:
                METRICS.llm_call(schema_name, "invalid")
                raise LLMOutputError(
                    schema_name=schema_name,
                    validation_error=_describe(second_error, finish),
                    last_reply=reply,
                    endpoint=self.base_url,
                    model=self.model,
                ) from second_error

    async def text(self, *, system: str, user: str, temperature: float = 0.0, max_tokens: int | None = None) -> str:
        """Free text, for prose meant for people (summaries, e-mail drafts), never for parsing."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        with _tracer.start_as_current_span("llm.text") as span:
            span.set_attribute("llm.model", self.model)
            try:
                reply, _ = await self._complete(messages, temperature=temperature, max_tokens=max_tokens)
            except LLMError:
                METRICS.llm_text_call("failed")
                raise
            METRICS.llm_text_call("ok")
        return reply or ""

    async def _complete(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> tuple[str | None, str | None]:
        """The reply's content and finish reason; failures leave as a classified `LLMError`."""
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature}
        if response_format is not None:
            payload["response_format"] = response_format
        limit = max_tokens if max_tokens is not None else self.max_tokens
        if limit is not None:
            payload["max_tokens"] = limit
        try:
            # The client's raw request path, not `chat.completions.create`: the typed method walks every
            # parameter (a schema of hundreds of keys) to transform it and builds a typed response
            # model, which made up most of a call's CPU in a populate batch. Same wire format, same
            # auth, timeout and error types.
            raw = await self._openai.post("/chat/completions", body=payload, cast_to=str)
            completion = json.loads(raw)
            choices = completion.get("choices") or []
        except Exception as exc:  # every failure leaves classified; the cause stays attached
            raise classify(exc, endpoint=self.base_url, model=self.model, timeout_s=self.timeout_s) from exc
        record_usage(completion.get("usage"))  # counted against the running activity's budget
        if not choices:
            return None, None
        choice = choices[0] or {}
        return (choice.get("message") or {}).get("content"), choice.get("finish_reason")

    async def aclose(self) -> None:
        await self._openai.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@functools.lru_cache(maxsize=256)
def _response_format(output: type[BaseModel], schema_name: str) -> dict[str, Any]:
    """Built once per output model: reshaping a pydantic schema costs more than the rest of a call.
    Callers must not mutate it (nothing does: it is only serialised)."""
    return {"type": "json_schema", "json_schema": {"name": schema_name, "schema": strict_json_schema(output), "strict": True}}


def _parse(reply: str | None, output: type[T]) -> T:
    if reply is None or not reply.strip():
        raise ValueError("the reply was empty; a JSON object was required")
    return output.model_validate_json(_unfence(reply))


def _unfence(reply: str) -> str:
    """Endpoints that ignore `response_format` sometimes wrap the JSON in one Markdown fence."""
    text = reply.strip()
    if text.startswith("```") and text.endswith("```") and "\n" in text:
        return text[text.index("\n") + 1 : -3]
    return text


def _describe(error: ValueError, finish_reason: str | None = None) -> str:
    if isinstance(error, ValidationError):
        lines = []
        for item in error.errors(include_url=False)[:20]:
            where = ".".join(str(part) for part in item["loc"]) or "(root)"
            lines.append(f"- {where}: {item['msg']}")
        text = "\n".join(lines)
    else:
        text = str(error)
    if finish_reason == "length":
        text += "\n(The reply was cut off at the token limit; answer more briefly.)"
    return text
