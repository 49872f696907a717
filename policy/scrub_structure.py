"""Structural scrubbing: a secret found by where it stands, not by what it looks like.

A value is a secret because a secret name labels it: the value of a secret-named key
(``password=abc123``, ``"apiKey": "..."``, ``X-Api-Key: ...``, ``--token abc``), the value beside a name
field holding a secret name (``{"name": "AWS_SECRET_ACCESS_KEY", "value": ...}``, ``["PASSWORD", ...]``,
Hadoop ``<name>/<value>`` properties), or everything under a secret section (``"passwords": [..]``,
``credentials:`` in YAML, a Kubernetes Secret's data). All of it is found in free text (a tool's error
message, a log excerpt, a config dump), so a caller that only has a string is covered as well as one
with a decoded value. The whole value is redacted, however short and whatever characters it holds.

The finders, one per syntax: ``policy.scrub_assignments`` (``key=value``, ``key: value``, quoted fields,
flags, YAML blocks), ``policy.scrub_brackets`` (JSON, Python reprs and lists read as structures) and
``policy.scrub_xml``. Names are judged by ``policy.secret_names``. This module holds what they share and
the gate in front of them.

Pure: stdlib only, no I/O, no project imports. Linear in the text: no pattern backtracks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from policy.secret_names import is_secret_name, name_words

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
    found = run.match(text, end)
    assert found is not None  # callers pass a pattern that matches the empty string
    right = found.end()
    return text[left:right], right


class Span(NamedTuple):
    """Where a secret sits in the text, and why it is one."""

    start: int
    end: int
    kind: str
