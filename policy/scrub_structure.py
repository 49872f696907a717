"""Find secrets by where they stand: the value of a secret-named key, wherever the key appears in text.

Three shapes, all in free text (a tool's error message, a log excerpt, a config dump), so a caller that
only has a string gets the same treatment as one with a decoded JSON value:

- assignments: ``password=abc123``, ``export AWS_SECRET_ACCESS_KEY=...``, ``"apiKey": "..."``,
  ``'pwd': 'x'``, ``X-Api-Key: ...``, ``--token abc``, ``?access_token=...&`` (URL parameters);
- name/value pairs inside embedded JSON or Python reprs: ``{"name": "AWS_SECRET_ACCESS_KEY", "value": ...}``,
  ``{'Key': 'DbPassword', 'Value': ...}``, ``["PASSWORD", "..."]``, argv lists ``["--password", "..."]``;
- a list under a secret-named key (``"passwords": ["a", "b"]``) and a Kubernetes Secret's data.

The whole value is redacted, however short and whatever characters it holds: a quoted value to its
closing quote, a bare value to the next whitespace (and to ``&`` only inside a URL query), a header or
line-initial ``key: value`` to the end of the line. Names are judged by ``policy.secret_names``.

Pure: stdlib only, no I/O, no project imports. Linear in the text: no pattern here backtracks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from policy.secret_names import (
    is_name_field,
    is_placeholder,
    is_secret_name,
    is_value_field,
    name_words,
)

KEYED = "keyed_secret"
NAMED = "named_secret"

# A cheap gate, matched against the lower-cased text: text without any of these holds no secret-named key.
STEMS = re.compile(r"p(?:ass|wd|w|sk)|secret|token|key|auth|cred|cookie|signature|otp")


_NARROW = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_NOT_WIDE = frozenset(" \t\r\n\f\v\"'{}[]():=,")
# Secret words only in a compound, so a one-word identifier around them may still be part of a
# secret name inside a quoted string (``"db pass"``, ``"api key"``).
_COMPOUND_ONLY = frozenset({"pass", "pw", "key", "keys"})


def mentions_secret_name(text: str, lowered: str) -> bool:
    """Whether any identifier in ``text`` is a secret name: the gate in front of the structural finders.

    Every key, flag, list item or field those finders judge is a maximal run of identifier characters
    (narrow: an assignment key) or of non-separator characters (wide: a lexer word), or a quoted string
    holding one; each holds a stem, and a name is secret only if the run around its stem is secret
    or is a lone compound-only word. So a False here means both finders would find nothing.
    """
    for m in STEMS.finditer(lowered):
        narrow = _expand(text, m.start(), m.end(), lambda c: c in _NARROW)
        if is_secret_name(narrow):
            return True
        wide = _expand(text, m.start(), m.end(), lambda c: c not in _NOT_WIDE)
        if wide != narrow and is_secret_name(wide):
            return True
        if any(len(name_words(run)) == 1 and name_words(run)[0] in _COMPOUND_ONLY for run in (narrow, wide)):
            return True
    return False


def _expand(text: str, start: int, end: int, inside: Callable[[str], bool]) -> str:
    """The run of characters satisfying ``inside`` around ``text[start:end]``."""
    while start > 0 and inside(text[start - 1]):
        start -= 1
    n = len(text)
    while end < n and inside(text[end]):
        end += 1
    return text[start:end]


class Span(NamedTuple):
    start: int
    end: int
    kind: str


# An identifier followed by an assignment separator. Possessive quantifiers: an identifier is taken
# whole or not at all, so a long run without a separator costs one pass.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z0-9_.\-]{1,128}+)(?P<close>\\{0,3}[\"'])?[ \t]*+(?P<sep>:=|=>|=(?!=)|:(?!:))"
)
# A command-line flag followed by its value: ``--password hunter2``.
_FLAG = re.compile(r"(?<![A-Za-z0-9_.\-])(?P<key>--[A-Za-z0-9][A-Za-z0-9_.\-]{0,126}+)[ \t]++(?=[^\s\-\"'])")
# A bare value runs to whitespace; a quote ends it only where a closing quote would stand.
_BARE = re.compile(r"(?:[^\s\"'`]|[\"'`](?![\s,;:)\]}\\]|$))++")
_BARE_IN_URL = re.compile(r"(?:[^\s\"'`&#]|[\"'`](?![\s,;:)\]}\\&#]|$))++")
_STRING_PREFIX = re.compile(r"[bBrRuU]{1,2}(?=[\"'])")
_QUOTE = re.compile(r"\\{0,3}[\"'`]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9\-]*[ \t]+(?=\S)")
_HEADER_WORDS = frozenset({"authorization", "cookie"})
# A lower-case word followed by another: how a sentence goes on after "token:". A secret that is one
# lower-case word followed by prose ("password: sunshine was rejected") stays visible; the benchmark's
# ordinary corpus is why.
_PROSE = re.compile(r"[a-z]++[ \t]+[a-z]")


def find_keyed_values(text: str) -> list[Span]:
    """Values of secret-named keys in assignments, JSON/repr fields and command-line flags."""
    spans: list[Span] = []
    for m in _ASSIGNMENT.finditer(text):
        key = m.group("key")
        if not is_secret_name(key):
            continue
        span = _assigned_value(text, m.start("key"), m.end(), m.group("sep"), key)
        if span is not None:
            spans.append(span)
    if "--" in text:
        for m in _FLAG.finditer(text):
            if is_secret_name(m.group("key")):
                bare = _BARE.match(text, m.end())
                if bare and not is_placeholder(bare.group()):
                    spans.append(Span(bare.start(), bare.end(), KEYED))
    return spans


def _assigned_value(text: str, key_start: int, pos: int, sep: str, key: str) -> Span | None:
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos >= n:
        return None
    prefix = _STRING_PREFIX.match(text, pos)
    if prefix:
        pos = prefix.end()
    quote = _QUOTE.match(text, pos)
    if quote:
        return _quoted(text, pos, quote.group())
    if text[pos] in "{[":
        return None  # a container: find_paired_values redacts everything under the key
    line_end = _line_end(text, pos)
    words = name_words(key)
    header = bool(words) and words[-1] in _HEADER_WORDS
    if header or (sep == ":" and _starts_line(text, key_start)):
        end = line_end
        before = text[key_start - 1] if key_start else ""
        if before and before in "\"'":
            stop = text.find(before, pos, end)
            end = stop if stop >= 0 else end
        while end > pos and text[end - 1] in " \t":
            end -= 1
        if header:
            scheme = _SCHEME.match(text, pos, end)
            if scheme:
                pos = scheme.end()
        value = text[pos:end]
        if end <= pos or is_placeholder(value) or is_placeholder(value.split(None, 1)[0]):
            return None
        return Span(pos, end, KEYED)
    in_url = key_start > 0 and text[key_start - 1] in "?&;"
    bare = (_BARE_IN_URL if in_url else _BARE).match(text, pos, line_end)
    if not bare or is_placeholder(bare.group()):
        return None
    if sep == ":" and _PROSE.match(text, bare.start()):
        return None  # "failed to refresh token: connection refused" is a sentence, not a field
    return Span(bare.start(), bare.end(), KEYED)


def _quoted(text: str, pos: int, quote: str) -> Span | None:
    """The content of a quoted value, to its closing quote (or the line's end if it never closes)."""
    start = pos + len(quote)
    line_end = _line_end(text, start)
    if len(quote) == 1:
        i = start
        while i < line_end:
            c = text[i]
            if c == "\\":
                i += 2
                continue
            if c == quote:
                break
            i += 1
        end = min(i, line_end)
    else:
        found = text.find(quote, start, line_end)
        end = found if found >= 0 else line_end
    if end <= start or is_placeholder(text[start:end]):
        return None
    return Span(start, end, KEYED)


def _line_end(text: str, pos: int) -> int:
    nl = text.find("\n", pos)
    end = len(text) if nl < 0 else nl
    if end > pos and text[end - 1] == "\r":
        end -= 1
    return end


def _starts_line(text: str, key_start: int) -> bool:
    """``key: value`` at the start of a line (YAML, HTTP headers, env dumps): the value is the rest of it."""
    line_start = text.rfind("\n", 0, key_start) + 1
    return text[line_start:key_start].strip(" \t-#") == ""


# --- name/value pairs inside embedded JSON, Python reprs and JS-style objects -----------------------

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


class _Frame:
    """One open object or list while lexing: its direct fields/items and every scalar below it."""

    __slots__ = ("is_object", "fields", "items", "commas", "key", "expect", "below")

    def __init__(self, is_object: bool) -> None:
        self.is_object = is_object
        self.fields: list[tuple[str, _Scalar | list[_Scalar]]] = []
        self.items: list[_Scalar | None] = []
        self.commas = 0
        self.key: str | None = None
        self.expect = "key"
        self.below: list[_Scalar] = []

    def scalar(self, token: _Scalar) -> None:
        if not self.is_object:
            self.items.append(token)
            self.below.append(token)
        elif self.expect == "value" and self.key is not None:
            self.fields.append((self.key, token))
            self.below.append(token)
            self.expect = "comma"
        else:
            self.key = token.text
            self.expect = "sep"

    def child_closed(self, child: _Frame) -> None:
        self.below.extend(child.below)
        if not self.is_object:
            self.items.append(None)
        elif self.expect == "value" and self.key is not None:
            self.fields.append((self.key, child.below))
            self.expect = "comma"


def find_paired_values(text: str) -> list[Span]:
    """Values named by a sibling field or list item inside bracketed structures embedded in text, and
    everything inside a container that is the value of a secret-named key.

    The text itself is read as one lenient object, so ``passwords: [a, b]`` at the top level of a
    YAML excerpt or an error message is judged like a JSON field.
    """
    spans: list[Span] = []
    stack: list[_Frame] = [_Frame(True)]
    too_deep = 0  # brackets opened past _MAX_DEPTH: read as part of the frame that holds them
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "word" or kind == "dq" or kind == "sq":
            if kind == "word":
                token = _Scalar(m.start(), m.end(), m.group())
            else:
                token = _Scalar(m.start() + 1, m.end() - 1, m.group()[1:-1])
            stack[-1].scalar(token)
        elif kind == "open":
            if len(stack) < _MAX_DEPTH:
                stack.append(_Frame(m.group() == "{"))
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
                _judge(frame, spans)
                if stack:
                    stack[-1].child_closed(frame)
                if frame.is_object == want_object:
                    break
        elif kind == "sep":
            if stack[-1].is_object and stack[-1].expect == "sep":
                stack[-1].expect = "value"
        elif kind == "comma" or (kind == "newline" and len(stack) == 1):
            # Outside brackets the text is read line by line (``key: [..]`` in YAML, an error message).
            top = stack[-1]
            top.commas += kind == "comma"
            if top.is_object:
                top.expect = "key"
                top.key = None
    while stack:  # the text itself, and whatever a truncated excerpt left open
        frame = stack.pop()
        _judge(frame, spans)
        if stack:
            stack[-1].child_closed(frame)
    return spans


def _judge(frame: _Frame, spans: list[Span]) -> None:
    if frame.is_object:
        _judge_object(frame, spans)
    else:
        _judge_list(frame, spans)


def _judge_object(frame: _Frame, spans: list[Span]) -> None:
    fields = frame.fields
    named = any(
        isinstance(v, _Scalar) and is_name_field(k) and is_secret_name(v.text) for k, v in fields
    )
    k8s_secret = any(isinstance(v, _Scalar) and k == "kind" and v.text == "Secret" for k, v in fields)
    for key, value in fields:
        if named and is_value_field(key):
            _emit(value, NAMED, spans)
        elif k8s_secret and key in ("data", "stringData"):
            _emit(value, NAMED, spans)
        elif isinstance(value, list) and is_secret_name(key):
            _emit(value, KEYED, spans)  # a scalar under a secret key is find_keyed_values' to judge


def _judge_list(frame: _Frame, spans: list[Span]) -> None:
    items = frame.items
    if len(items) == 2 and frame.commas == 1 and items[0] is not None and items[1] is not None:
        if is_secret_name(items[0].text):
            _emit(items[1], NAMED, spans)
            return
    for flag, value in zip(items, items[1:]):
        if (
            flag is not None
            and value is not None
            and flag.text.startswith("-")
            and not value.text.startswith("-")
            and is_secret_name(flag.text)
        ):
            _emit(value, NAMED, spans)


def _emit(value: _Scalar | list[_Scalar], kind: str, spans: list[Span]) -> None:
    for scalar in [value] if isinstance(value, _Scalar) else value:
        if scalar.end > scalar.start and not is_placeholder(scalar.text):
            spans.append(Span(scalar.start, scalar.end, kind))
