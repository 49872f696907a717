"""The served model's context window and tokenizer, asked of the server instead of assumed.

A constant 8,192-token budget against the offline model's 4,096-token slot made every code-generation call
with a large tool catalogue overflow. The window now comes, in this order, from the
``BAMBOO_LLM_CONTEXT_WINDOW`` setting (when not 0), from the server (llama.cpp reports each slot's
``n_ctx`` and vLLM ``max_model_len`` in ``GET /models``), or a default for endpoints that say nothing
(hosted APIs). Prompts are counted with the served model's own tokenizer when the server offers one
(llama.cpp's ``POST /tokenize``), else with an offline approximation; the budget margin absorbs the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import httpx
from pydantic import BaseModel

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_WINDOW = 8192
PROBE_TIMEOUT_S = 5.0


class ServedModel(BaseModel):
    """What the endpoint said about the model; ``None`` fields were not reported."""

    context_window: int | None = None
    tokenizer_url: str | None = None
    source: str = "default"


def _models_entry(payload: Any, model: str) -> dict[str, Any] | None:
    entries = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(entries, list) or not entries:
        return None
    named = [e for e in entries if isinstance(e, dict) and (e.get("id") == model or model in (e.get("aliases") or []))]
    if named:
        return named[0]
    return entries[0] if len(entries) == 1 and isinstance(entries[0], dict) else None


def _window_of(entry: dict[str, Any]) -> int | None:
    meta: dict[str, Any] = entry["meta"] if isinstance(entry.get("meta"), dict) else {}
    for value in (meta.get("n_ctx"), entry.get("max_model_len"), entry.get("context_length"), entry.get("context_window")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def probe_served_model(base_url: str, model: str, api_key: str | None = None) -> ServedModel:
    """Ask an OpenAI-compatible endpoint about ``model``; never raises (an unreachable server says nothing)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    root = base_url.rstrip("/")
    info = ServedModel()
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, headers=headers) as http:
            reply = http.get(f"{root}/models")
            if reply.status_code == 200:
                entry = _models_entry(reply.json(), model)
                window = _window_of(entry) if entry else None
                if window:
                    info = ServedModel(context_window=window, source="server")
            server_root = root.removesuffix("/v1")
            probe = http.post(f"{server_root}/tokenize", json={"content": "probe"})
            if probe.status_code == 200 and isinstance(probe.json().get("tokens"), list):
                info = info.model_copy(update={"tokenizer_url": f"{server_root}/tokenize"})
    except (httpx.HTTPError, ValueError) as exc:
        log.info("could not ask %s about model %s (%s); using settings and defaults", base_url, model, exc)
    return info


def resolve_context_window(configured: int, served: ServedModel) -> tuple[int, str]:
    """The window to budget prompts against, and where it came from."""
    if configured > 0:
        return configured, "setting"
    if served.context_window:
        return served.context_window, "server"
    return DEFAULT_CONTEXT_WINDOW, "default"


def remote_token_counter(tokenizer_url: str, fallback: Callable[[str], int]) -> Callable[[str], int]:
    """Count tokens with the served model's tokenizer (cached per text); the fallback when a call fails.

    Synchronous on purpose: tool selection counts line by line and runs in a thread (see
    ``bamboo.tools.selection``), so the worker's event loop is never blocked by these calls.
    """
    http = httpx.Client(timeout=PROBE_TIMEOUT_S)

    @lru_cache(maxsize=32768)
    def count(text: str) -> int:
        try:
            reply = http.post(tokenizer_url, json={"content": text})
            reply.raise_for_status()
            return len(reply.json()["tokens"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return fallback(text)

    return count
