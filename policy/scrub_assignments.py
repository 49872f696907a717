"""Secrets after a secret-named key: ``key=value``, ``key: value``, quoted fields, flags, YAML blocks.

``password=abc123``, ``export AWS_SECRET_ACCESS_KEY=...``, ``"apiKey": "..."``, ``'pwd': 'x'``,
``os.environ['DB_PASSWORD'] = 'x'``, ``X-Api-Key: ...``, ``--token abc``, ``?access_token=...&``, a
``.netrc`` line, and
a ``password: |`` block or a ``credentials:`` mapping in YAML. The value is taken whole: a quoted value
to its closing quote, a bare value to the next whitespace (and to ``&`` only inside a URL query), a
header or a line-initial ``key: value`` to the end of the line, a YAML block to its last indented line.
A name field holding a secret name (``"name": "DB_PASSWORD"``) sends the search to the value fields
around it.

Pure: stdlib only, no I/O, no project imports. Linear in the text.
"""

from __future__ import annotations

import re
from functools import lru_cache

from policy.scrub_structure import KEYED, NAMED, Span
from policy.secret_names import (
    is_name_field,
    is_placeholder,
    is_secret_name,
    is_secret_section,
    is_value_field,
    name_words,
)

# An identifier followed by an assignment separator. Possessive quantifiers: an identifier is taken
# whole or not at all, so a long run without a separator costs one pass.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z0-9_.\-]{1,128}+)"  # the key, whole
    r"(?P<close>\\{0,3}[\"']\]?)?"  # the quote closing a quoted key, and a subscript's bracket
    r"[ \t]*+(?P<sep>:=|=>|=(?!=(?:\s|$))|:(?!:))"  # not ``==`` (a comparison) nor ``::``
)
# A command-line flag followed by its value: ``--password hunter2``.
_FLAG = re.compile(r"(?<![A-Za-z0-9_.\-])(?P<key>--[A-Za-z0-9][A-Za-z0-9_.\-]{0,126}+)[ \t]++(?!--|[\s\"'])")
# A .netrc entry: ``machine db login bob password hunter2`` (no separator but the spaces).
_NETRC = re.compile(r"(?<![A-Za-z0-9_\-])(?:login|account)[ \t]++\S++[ \t]++(?:password|passwd)[ \t]++(?P<value>\S++)")
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
    if "login" in text or "account" in text:
        spans.extend(Span(m.start("value"), m.end("value"), KEYED) for m in _NETRC.finditer(text))
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
        body = _QUOTED_BODY[quote].match(text, start)
        assert body is not None  # every _QUOTED_BODY pattern matches the empty string
        end = body.end()
    else:
        line_end = lines.around(start)[1]
        found = text.find(quote, start, line_end)
        end = found if found >= 0 else line_end
    if end <= start or is_placeholder(text[start:end]):
        return None
    return Span(start, end, KEYED)
