"""A tool's result on its way into a sandbox: made plain JSON, checked, scrubbed and measured, in that order.

Whatever a tool returns — bytes, tuples, sets, arbitrary objects, keys that are not strings — becomes JSON
types *first*, so the scrubber sees every string the script will see. Bytes and objects used to pass the
scrubber untouched and be stringified after it by the frame encoder: an AWS key, a GitHub token and a canary
reached the script verbatim, and a bytes key made the reply unencodable (the script waited for it until its
deadline). Bytes become text (UTF-8, undecodable bytes as ``\\x`` escapes); any other object becomes its
``str()``, which is what the frame encoder used to send.

``prepare`` does CPU work sized by the result: the bridge runs it in a worker thread, never on the event loop.
It is bounded by the result cap: a value whose plain form is already well past the cap is refused as too large
before the scrubber reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bamboo.sandbox.protocol import MAX_DEPTH, value_problem
from policy.scrub import scrub_value

SCRUB_SLACK = 2  # a plain value up to this many times the cap is scrubbed and measured; past it, refused unread


class _TooLarge(Exception):
    pass


class _TooDeep(Exception):
    pass


@dataclass(frozen=True)
class Prepared:
    """What the bridge hands on (``data``) or why it cannot (``problem``, or ``size`` over the cap)."""

    data: Any = None
    size: int = 0
    redactions: int = 0
    problem: str | None = None
    too_large: bool = False
    at_least: bool = False  # ``size`` is a lower bound: the value was refused before it was encoded


def prepare(data: Any, max_bytes: int) -> Prepared:
    """``data`` as plain JSON, scrubbed, with its encoded size; or the reason it cannot travel."""
    try:
        plain = to_plain_json(data, budget=SCRUB_SLACK * max_bytes)
    except _TooLarge:
        return Prepared(size=SCRUB_SLACK * max_bytes, too_large=True, at_least=True)
    except _TooDeep:
        return Prepared(problem=f"it is nested more than {MAX_DEPTH} levels deep")
    problem = value_problem(plain)
    if problem is not None:
        return Prepared(problem=problem)
    scrubbed, hits = scrub_value(plain)
    try:
        size = len(json.dumps(scrubbed, allow_nan=False).encode("utf-8"))
    except (ValueError, TypeError) as exc:
        return Prepared(problem=f"it is not JSON: {exc}", redactions=hits)
    return Prepared(data=scrubbed, size=size, redactions=hits, too_large=size > max_bytes)


def to_plain_json(value: Any, *, budget: int) -> Any:
    """A copy of ``value`` made only of dict, list, str, int, float, bool and None.

    Iterative. ``budget`` bounds the work: every node costs one, every string its length; past it, _TooLarge
    (the encoded value would be at least that long). Nesting past ``MAX_DEPTH`` (a reference cycle included)
    raises _TooDeep."""
    holder: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(holder, 0, value, 1)]
    while stack:
        target, slot, node, depth = stack.pop()
        budget -= 1
        if isinstance(node, str) or node is None or isinstance(node, (bool, int, float)):
            plain: Any = node
        elif isinstance(node, (bytes, bytearray, memoryview)):
            plain = bytes(node).decode("utf-8", "backslashreplace")
        elif isinstance(node, (Mapping, list, tuple, set, frozenset)):
            if depth > MAX_DEPTH:
                raise _TooDeep
            if isinstance(node, Mapping):
                plain = {}
                for key, child in node.items():
                    text = _key_text(key)
                    budget -= len(text)
                    plain[text] = None
                    stack.append((plain, text, child, depth + 1))
            else:
                items = list(node)
                plain = [None] * len(items)
                stack.extend((plain, i, child, depth + 1) for i, child in enumerate(items))
        else:
            plain = _text_of(node)
        if isinstance(plain, str):
            budget -= len(plain)
        if budget < 0:
            raise _TooLarge
        target[slot] = plain
    return holder[0]


def _key_text(key: Any) -> str:
    """A mapping key as JSON would write it (``True`` → ``"true"``, ``1`` → ``"1"``); bytes and objects as text."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key).decode("utf-8", "backslashreplace")
    return _text_of(key)


def _text_of(thing: object) -> str:
    """``str(thing)``, or its type's name when even that fails."""
    try:
        text = str(thing)
    except Exception:  # noqa: BLE001 — a tool's broken __str__ is not the script's problem
        return f"<{type(thing).__name__}>"
    return text if type(text) is str else f"<{type(thing).__name__}>"
