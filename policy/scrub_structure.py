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
from functools import lru_cache
from typing import NamedTuple

from policy.secret_names import (
    is_name_field,
    is_placeholder,
    is_secret_name,
    is_secret_section,
    is_value_field,
    name_words,
)

KEYED = "keyed_secret"
NAMED = "named_secret"

# A cheap gate, matched against the lower-cased text: text without any of these holds no secret-named key.
STEMS = re.compile(r"p(?:ass|wd|w|sk)|secret|token|key|auth|cred|cookie|signature|otp")


_NARROW = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_NARROW_RUN = re.compile(r"[A-Za-z0-9_.\-]*+")
_NOT_WIDE = frozenset(" \t\r\n\f\v\"'{}[]():=,")
_WIDE_RUN = re.compile(r"[^\s\"'{}\[\]():=,]*+")
# Secret words only in a compound, so a one-word identifier around them may still be part of a
# secret name inside a quoted string (``"db pass"``, ``"api key"``).
_COMPOUND_ONLY = frozenset({"pass", "pw", "key", "keys"})


def mentions_secret_name(text: str, lowered: str) -> bool:
    """Whether any identifier in ``text`` is a secret name: the gate in front of the structural finders.

    Every key, flag, list item or field those finders judge is a maximal run of identifier characters
    (narrow: an assignment key) or of non-separator characters (wide: a lexer word), or a quoted string
    holding one; each holds a stem, and a name is secret only if the run around its stem is secret
    or is a lone compound-only word. So a False here means both finders would find nothing.
    Linear: each run is looked at once, however many stems it holds.
    """
    narrow_done = wide_done = 0
    for m in STEMS.finditer(lowered):
        if m.start() >= narrow_done:
            narrow, narrow_done = _run_around(text, m.start(), m.end(), _NARROW.__contains__, _NARROW_RUN)
            if _could_be_secret(narrow):
                return True
        if m.start() >= wide_done:
            wide, wide_done = _run_around(text, m.start(), m.end(), _is_wide, _WIDE_RUN)
            if _could_be_secret(wide):
                return True
    return False


def _could_be_secret(run: str) -> bool:
    if is_secret_name(run):
        return True
    words = name_words(run)
    return len(words) == 1 and words[0] in _COMPOUND_ONLY


def _is_wide(c: str) -> bool:
    return c not in _NOT_WIDE


def _run_around(
    text: str, start: int, end: int, inside: Callable[[str], bool], run: re.Pattern[str]
) -> tuple[str, int]:
    """The run of ``inside`` characters around ``text[start:end]`` (``run`` matches it forwards) and
    where it ends. Names longer than 128 characters are never secret names, so the backward scan
    stops there."""
    left = start
    while left > 0 and start - left <= 128 and inside(text[left - 1]):
        left -= 1
    right = run.match(text, end).end()
    return text[left:right], right


class Span(NamedTuple):
    start: int
    end: int
    kind: str


# An identifier followed by an assignment separator. Possessive quantifiers: an identifier is taken
# whole or not at all, so a long run without a separator costs one pass.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z0-9_.\-]{1,128}+)(?P<close>\\{0,3}[\"']\]?)?[ \t]*+(?P<sep>:=|=>|=(?!=(?:\s|$))|:(?!:))"
)
# A command-line flag followed by its value: ``--password hunter2``.
_FLAG = re.compile(r"(?<![A-Za-z0-9_.\-])(?P<key>--[A-Za-z0-9][A-Za-z0-9_.\-]{0,126}+)[ \t]++(?!--|[\s\"'])")
# A bare value runs to whitespace; a quote ends it only where a closing quote would stand.
_BARE = re.compile(r"(?:[^\s\"'`]|[\"'`](?![\s,;:)\]}\\]|$))++")
_BARE_IN_OBJECT = re.compile(r"[^\s\"'`,{}\[\]()]++")
_BARE_IN_URL = re.compile(r"(?:[^\s\"'`&#]|[\"'`](?![\s,;:)\]}\\&#]|$))++")
_STRING_PREFIX = re.compile(r"[bBrRuU]{1,2}(?=[\"'])")
_QUOTE = re.compile(r"\\{0,3}[\"'`]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9\-]*[ \t]+(?=\S)")
_HEADER_WORDS = frozenset({"authorization", "cookie"})
_NOT_INDENT = re.compile(r"[^ \t\-#]")

# A lower-case word followed by another: how a sentence goes on after "token:". A secret that is one
# lower-case word followed by prose ("password: sunshine was rejected") stays visible; the benchmark's
# ordinary corpus is why.
_PROSE = re.compile(r"[a-z]++[ \t]+[a-z]")


def find_keyed_values(text: str) -> list[Span]:
    """Values of secret-named keys in assignments, JSON/repr fields and command-line flags.

    A key inside a value already taken (``password=password=...``) is part of that value, so the scan
    goes on after it: linear in the text.
    """
    spans: list[Span] = []
    lines = _Lines(text)
    pos = 0
    while (m := _ASSIGNMENT.search(text, pos)) is not None:
        pos = m.end()
        key = m.group("key")
        if is_name_field(key):
            spans.extend(_pair_values(text, m.start(), m.end()))
            continue
        if not is_secret_name(key) or _declares_secret(text, m.start(), key):
            continue
        span = _assigned_value(text, lines, m.start("key"), m.end(), m.group("sep"), key)
        if span is not None:
            spans.append(span)
            pos = max(pos, span.end)
    if "--" in text:
        pos = 0
        while (m := _FLAG.search(text, pos)) is not None:
            pos = m.end()
            if is_secret_name(m.group("key")):
                bare = _BARE.match(text, m.end())
                if bare and not is_placeholder(bare.group()):
                    spans.append(Span(bare.start(), bare.end(), KEYED))
                    pos = bare.end()
    return spans


_PAIR_NAME = re.compile(r"[ \t]*+\\{0,3}[\"']?(?P<name>[A-Za-z0-9_./\-]{1,128}+)")
_BRACKET = re.compile(r"[{}()\[\]]")
_PAIR_REACH = 4096


def _pair_values(text: str, key_start: int, after_sep: int) -> list[Span]:
    """``{"name": "DB_PASSWORD", ..., "value": "..."}`` found from its name field, quotes ignored.

    The lexer in ``find_paired_values`` reads such objects properly, but one stray quote earlier on
    the line (``msg="request {"name": ...``) throws its strings off; this finds the same pair by the
    brackets around the name field alone, so the two together miss only what fools both.
    """
    name = _PAIR_NAME.match(text, after_sep)
    if name is None or not is_secret_name(name.group("name")):
        return []
    left = key_start - 1
    floor = max(0, key_start - _PAIR_REACH)
    while left >= floor and text[left] not in "{}()[]":
        left -= 1
    if left < floor or text[left] not in "{(":
        return []
    closing = _BRACKET.search(text, name.end(), min(len(text), name.end() + _PAIR_REACH))
    right = closing.start() if closing and closing.group() in "})" else min(len(text), name.end() + _PAIR_REACH)
    spans: list[Span] = []
    for field in _ASSIGNMENT.finditer(text, left + 1, right):
        if not is_value_field(field.group("key")):
            continue
        pos = field.end()
        while pos < right and text[pos] in " \t":
            pos += 1
        quote = _QUOTE.match(text, pos)
        if quote:
            span = _quoted(text, _Lines(text), pos, quote.group())
        else:
            bare = _BARE_IN_OBJECT.match(text, pos, right)
            span = Span(bare.start(), bare.end(), NAMED) if bare and not is_placeholder(bare.group()) else None
        if span is not None:
            spans.append(Span(span.start, span.end, NAMED))
    return spans


def _declares_secret(text: str, key_start: int, key: str) -> bool:
    """The ``secret`` of a ``{{secret:NAME}}`` declaration: it names a secret without holding one."""
    return key == "secret" and text[max(0, key_start - 8) : key_start].rstrip().endswith("{{")


@lru_cache(maxsize=1024)
def _is_header(key: str) -> bool:
    """``Authorization``, ``Proxy-Authorization``, ``Cookie``: their value runs to the end of the line."""
    words = name_words(key)
    return bool(words) and words[-1] in _HEADER_WORDS


class _Lines:
    """Where the line around a position starts and ends, computed once per line for a forward scan."""

    __slots__ = ("text", "start", "end")

    def __init__(self, text: str) -> None:
        self.text = text
        self.start = 0
        self.end = -1

    def around(self, pos: int) -> tuple[int, int]:
        if not self.start <= pos <= self.end:
            text = self.text
            self.start = text.rfind("\n", 0, pos) + 1
            nl = text.find("\n", pos)
            self.end = len(text) if nl < 0 else nl
        end = self.end
        if end > pos and self.text[end - 1] == "\r":
            end -= 1
        return self.start, end


def _assigned_value(text: str, lines: _Lines, key_start: int, pos: int, sep: str, key: str) -> Span | None:
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
        return _quoted(text, lines, pos, quote.group())
    if text[pos] in "{[":
        return None  # a container: find_paired_values redacts everything under the key
    header = _is_header(key)
    line_start, line_end = lines.around(pos)
    starts_line = _NOT_INDENT.search(text, line_start, key_start) is None
    if header or (sep == ":" and starts_line):
        # ``key: value`` at the start of a line (YAML, HTTP headers) or a header: the rest of the line.
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
        if sep == ":" and starts_line and (end <= pos or _BLOCK_INDICATOR.fullmatch(value)):
            return _yaml_block(text, key_start - line_start, line_end, key, block_scalar=end > pos)
        prose = sep == ":"
        if end <= pos or is_placeholder(value, prose=prose) or is_placeholder(value.split(None, 1)[0], prose=prose):
            return None
        return Span(pos, end, KEYED)
    in_url = key_start > 0 and text[key_start - 1] in "?&;"
    bare = (_BARE_IN_URL if in_url else _BARE).match(text, pos)
    if not bare or is_placeholder(bare.group(), prose=sep == ":"):
        return None
    if sep == ":" and _PROSE.match(text, bare.start()):
        return None  # "failed to refresh token: connection refused" is a sentence, not a field
    return Span(bare.start(), bare.end(), KEYED)


_BLOCK_INDICATOR = re.compile(r"[|>][+\-]?[1-9]?")


def _yaml_block(text: str, indent: int, line_end: int, key: str, *, block_scalar: bool) -> Span | None:
    """The indented lines under ``key:`` in YAML: a block scalar (``password: |``) under a secret
    name, or a nested mapping or sequence under a secret section (``credentials:``, ``passwords:``)."""
    if not (is_secret_name(key) if block_scalar else is_secret_section(key)):
        return None
    n = len(text)
    newline = text.find("\n", line_end)  # line_end stops before a "\r\n" too
    if newline < 0:
        return None
    pos = newline + 1
    start = end = -1
    while pos < n:
        nl = text.find("\n", pos)
        stop = n if nl < 0 else nl
        line = text[pos:stop]
        content = line.lstrip(" \t")
        if content.strip():
            depth = len(line) - len(content)
            if not (depth > indent or (not block_scalar and depth == indent and content.startswith("-"))):
                break
            if start < 0:
                start = pos + depth
            end = pos + len(line.rstrip())
        if nl < 0:
            break
        pos = nl + 1
    return Span(start, end, KEYED) if start >= 0 else None


_QUOTED_BODY = {
    '"': re.compile(r'(?:[^"\\\r\n]|\\.)*+'),
    "'": re.compile(r"(?:[^'\\\r\n]|\\.)*+"),
    "`": re.compile(r"(?:[^`\\\r\n]|\\.)*+"),
}


def _quoted(text: str, lines: _Lines, pos: int, quote: str) -> Span | None:
    """The content of a quoted value, to its closing quote (or the line's end if it never closes)."""
    start = pos + len(quote)
    if len(quote) == 1:
        end = _QUOTED_BODY[quote].match(text, start).end()
    else:
        line_end = lines.around(start)[1]
        found = text.find(quote, start, line_end)
        end = found if found >= 0 else line_end
    if end <= start or is_placeholder(text[start:end]):
        return None
    return Span(start, end, KEYED)


# --- XML elements: <password>..</password>, <name>fs.s3a.secret.key</name><value>..</value> -----------

_XML_ELEMENT = re.compile(
    r"<(?P<tag>[A-Za-z_][A-Za-z0-9_.:\-]{0,127}+)(?:[ \t\r\n][^<>]{0,1024}+)?>(?P<body>[^<]{0,4096}+)</(?P=tag)[ \t]*>"
)
_BLANK = re.compile(r"\s*+")


def find_xml_values(text: str) -> list[Span]:
    """The text of an element named like a secret, and of the value element beside a name element
    that holds a secret name (Hadoop-style ``<property>`` configuration, settings files)."""
    spans: list[Span] = []
    siblings: list[re.Match[str]] = []
    for m in _XML_ELEMENT.finditer(text):
        if siblings and _BLANK.match(text, siblings[-1].end()).end() != m.start():
            _judge_xml_siblings(siblings, spans)
            siblings = []
        siblings.append(m)
        tag, body = m.group("tag"), m.group("body")
        if is_secret_name(tag.rsplit(":", 1)[-1]) and not is_placeholder(body):
            spans.append(Span(m.start("body"), m.end("body"), KEYED))
    _judge_xml_siblings(siblings, spans)
    return spans


def _judge_xml_siblings(siblings: list[re.Match[str]], spans: list[Span]) -> None:
    if not any(is_name_field(e.group("tag")) and is_secret_name(e.group("body").strip()) for e in siblings):
        return
    for e in siblings:
        if is_value_field(e.group("tag")) and not is_placeholder(e.group("body")):
            spans.append(Span(e.start("body"), e.end("body"), NAMED))


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
        held = value.text if isinstance(value, _Scalar) else text[value.start : value.end] if value.end - value.start <= 128 else ""
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
