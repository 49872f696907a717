"""JSON schemas from pydantic models, reshaped for strict structured output.

OpenAI's strict mode (and llama.cpp's grammar compiler, which turns the schema into a decoding
grammar) wants every object closed (`additionalProperties: false`), every property listed as
required, no `default`s, no `oneOf`, and no `$ref` carrying sibling keywords. Pydantic's schema
differs on each point, so it is rewritten once here instead of at each call site. The reply is
still validated by the original pydantic model, which supplies whatever the schema leaves out.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from pydantic import BaseModel

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def schema_name_for(model: type[BaseModel], name: str | None = None) -> str:
    """A response-format name the OpenAI API accepts (``^[A-Za-z0-9_-]{1,64}$``)."""
    cleaned = _NAME_UNSAFE.sub("_", name or model.__name__)[:64]
    return cleaned or "output"


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = copy.deepcopy(model.model_json_schema())
    defs = schema.get("$defs", {})
    return _strict(schema, defs)


def _strict(node: Any, defs: dict[str, Any]) -> Any:
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        target = _resolve(ref, defs)
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**copy.deepcopy(target), **siblings}
    node.pop("default", None)
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf")
        node.pop("discriminator", None)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        node.pop("allOf")
        node = {**_strict(all_of[0], defs), **node}

    properties = node.get("properties")
    if isinstance(properties, dict):
        node["properties"] = {key: _strict(value, defs) for key, value in properties.items()}
        node["required"] = list(properties)
        node["additionalProperties"] = False
    elif isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _strict(node["additionalProperties"], defs)

    for key in ("items", "not"):
        if isinstance(node.get(key), dict):
            node[key] = _strict(node[key], defs)
    for key in ("anyOf", "allOf", "prefixItems"):
        if isinstance(node.get(key), list):
            node[key] = [_strict(item, defs) for item in node[key]]
    if isinstance(node.get("$defs"), dict):
        node["$defs"] = {key: _strict(value, defs) for key, value in node["$defs"].items()}
    return node


def _resolve(ref: str, defs: dict[str, Any]) -> dict[str, Any]:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix):] not in defs:
        raise ValueError(f"cannot resolve JSON-schema reference {ref!r}; only local #/$defs references are supported")
    return defs[ref[len(prefix):]]
