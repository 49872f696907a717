"""Argument checking against a tool's JSON schema, before anything is dispatched: the one validator the
sandbox bridge, the PanDA toolbox and external MCP tools all use.

A wrong or missing argument must come back to the caller (usually an LLM) as a sentence naming the
argument, never as an empty result it could mistake for "no data".
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.validators import validator_for


class ArgumentError(ValueError):
    """The arguments do not satisfy the tool's schema; the message says which one and why."""


class UnusableSchema(ArgumentError):
    """The tool's own input schema is not a valid JSON schema: no arguments can be checked against it."""


@lru_cache(maxsize=1024)
def _validator(schema_key: str) -> Any:
    schema = json.loads(schema_key)
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UnusableSchema(f"the tool's input schema is unusable: {exc.message}") from None
    return cls(schema)


def _describe(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    if error.validator == "required":
        return error.message.replace("is a required property", "is required")
    if error.validator == "additionalProperties":
        return f"unknown argument: {error.message.split('(', 1)[-1].rstrip(')')}"
    return f"argument '{where}': {error.message}" if where else error.message


def validate_arguments(tool_name: str, schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """Return the arguments with schema defaults filled in, or raise ArgumentError."""
    if not isinstance(arguments, dict):
        raise ArgumentError(f"{tool_name}: arguments must be a JSON object, got {type(arguments).__name__}")
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    problems = [_describe(e) for e in errors[:5]]
    properties = schema.get("properties") or {}
    if properties and "additionalProperties" not in schema:
        # Many servers leave additionalProperties open; a misspelt argument would then be dropped
        # silently and the call would answer a different question. Name it instead.
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            problems.append(f"unknown argument: {', '.join(repr(u) for u in unknown)}")
    if problems:
        detail = "; ".join(problems)
        expected = ", ".join(sorted((schema.get("properties") or {}).keys())) or "none"
        raise ArgumentError(f"invalid arguments for {tool_name}: {detail} (accepted arguments: {expected})")
    filled = copy.deepcopy(arguments)
    for key, prop in (schema.get("properties") or {}).items():
        if key not in filled and isinstance(prop, dict) and "default" in prop:
            filled[key] = copy.deepcopy(prop["default"])
    return filled
