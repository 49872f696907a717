"""Secrets inside bracketed structures embedded in text: JSON, Python reprs, JS-style objects, lists.

A lenient lexer reads objects and lists (unbalanced, truncated and mixed with prose, as error messages
are) and judges each when it closes: the value fields beside a name field holding a secret name, the
second item of ``["PASSWORD", ...]``, the item after a secret flag in an argv list, a Kubernetes Secret's
data, and a whole container under a secret section (``"passwords": [..]``, brackets included). Outside
brackets the text is read as one lenient object, line by line, so ``passwords: [a, b]`` in a YAML
excerpt or an error message is judged like a JSON field. A scalar under a secret key is left to
``policy.scrub_assignments``.

Pure: stdlib only, no I/O, no project imports. Linear in the text.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from policy.scrub_structure import KEYED, NAMED, Span
from policy.secret_names import (
    is_name_field,
    is_placeholder,
    is_secret_name,
    is_secret_section,
    is_value_field,
)

_TOKEN = re.compile(
    r"""(?P<dq>"(?:[^"\\\r\n]|\\.)*+")
      |(?P<sq>(?<![A-Za-z0-9])'(?:[^'\\\r\n]|\\.)*+'(?![A-Za-z0-9]))
      |(?P<open>[{\[(])
      |(?P<close>[}\])])
      |(?P<sep>[:=])
      |(?P<comma>,)
      |(?P<newline>\n)
      |(?P<word>[^\s"'{}\[\]():=,]++)
      |(?P<stray>["'])""",
    re.VERBOSE,
)
_MAX_DEPTH = 256


class _Scalar(NamedTuple):
    start: int
    end: int
    text: str


class _Container(NamedTuple):
    """A closed (or truncated) object or list: its span, brackets included."""

    start: int
    end: int


class _Frame:
    """One open object or list while lexing, with its direct fields (objects) or items (lists)."""

    __slots__ = ("is_object", "start", "fields", "items", "commas", "key", "expect")

    def __init__(self, is_object: bool, start: int) -> None:
        self.is_object = is_object
        self.start = start
        self.fields: list[tuple[str, _Scalar | _Container]] = []
        self.items: list[_Scalar | _Container] = []
        self.commas = 0
        self.key: str | None = None
        self.expect = "key"

    def add(self, value: _Scalar | _Container) -> None:
        if not self.is_object:
            self.items.append(value)
        elif self.expect == "value" and self.key is not None:
            self.fields.append((self.key, value))
            self.expect = "comma"
        elif isinstance(value, _Scalar):
            self.key = value.text
            self.expect = "sep"


def find_paired_values(text: str) -> list[Span]:
    """Values named by a sibling field or list item inside bracketed structures embedded in text, and
    whole containers that are the value of a secret-named key (``"passwords": [..]``).

    Outside brackets the text is read as one lenient object, line by line, so ``passwords: [a, b]``
    in a YAML excerpt or an error message is judged like a JSON field. A bracket that never closes
    (a truncated excerpt) extends to the end of the text.
    """
    spans: list[Span] = []
    stack: list[_Frame] = [_Frame(True, 0)]
    too_deep = 0  # brackets opened past _MAX_DEPTH: read as part of the frame that holds them
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "word":
            stack[-1].add(_Scalar(m.start(), m.end(), m.group()))
        elif kind == "dq" or kind == "sq":
            stack[-1].add(_Scalar(m.start() + 1, m.end() - 1, m.group()[1:-1]))
        elif kind == "open":
            if len(stack) < _MAX_DEPTH:
                stack.append(_Frame(m.group() == "{", m.start()))
            else:
                too_deep += 1
        elif kind == "close":
            if too_deep:
                too_deep -= 1
                continue
            want_object = m.group() == "}"
            if not any(f.is_object == want_object for f in stack[1:]):
                continue
            while len(stack) > 1:
                frame = stack.pop()
                _judge(frame, spans, text)
                stack[-1].add(_Container(frame.start, m.end()))
                if frame.is_object == want_object:
                    break
        elif kind == "sep":
            if stack[-1].is_object and stack[-1].expect == "sep":
                stack[-1].expect = "value"
        elif kind == "comma" or (kind == "newline" and len(stack) == 1):
            top = stack[-1]
            top.commas += kind == "comma"
            if top.is_object:
                top.expect = "key"
                top.key = None
    while len(stack) > 1:
        frame = stack.pop()
        _judge(frame, spans, text)
        stack[-1].add(_Container(frame.start, len(text)))
    _judge(stack[0], spans, text)
    return spans


def _judge(frame: _Frame, spans: list[Span], text: str) -> None:
    found: list[tuple[_Scalar | _Container, str]] = []
    if frame.is_object:
        _judge_object(frame, found)
    else:
        _judge_list(frame, found)
    for value, kind in found:
        if value.end <= value.start:
            continue
        if isinstance(value, _Scalar):
            held = value.text
        else:  # a container is a placeholder only when short (``{{secret:NAME}}``, ``[]``)
            held = text[value.start : value.end] if value.end - value.start <= 128 else "x"
        if not is_placeholder(held):
            spans.append(Span(value.start, value.end, kind))


def _judge_object(frame: _Frame, found: list[tuple[_Scalar | _Container, str]]) -> None:
    fields = frame.fields
    named = any(isinstance(v, _Scalar) and is_name_field(k) and is_secret_name(v.text) for k, v in fields)
    k8s_secret = any(isinstance(v, _Scalar) and k == "kind" and v.text == "Secret" for k, v in fields)
    for key, value in fields:
        if named and is_value_field(key):
            found.append((value, NAMED))
        elif k8s_secret and key in ("data", "stringData"):
            found.append((value, NAMED))
        elif isinstance(value, _Container) and is_secret_section(key):
            found.append((value, KEYED))  # a scalar under a secret key is find_keyed_values' to judge


def _judge_list(frame: _Frame, found: list[tuple[_Scalar | _Container, str]]) -> None:
    items = frame.items
    if len(items) == 2 and frame.commas == 1 and isinstance(items[0], _Scalar) and is_secret_name(items[0].text):
        found.append((items[1], NAMED))
        return
    for flag, value in zip(items, items[1:]):
        if (
            isinstance(flag, _Scalar)
            and isinstance(value, _Scalar)
            and flag.text.startswith("-")
            and not value.text.startswith("--")
            and is_secret_name(flag.text)
        ):
            found.append((value, NAMED))
