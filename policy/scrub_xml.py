"""Secrets in XML: ``<password>..</password>`` and ``<name>fs.s3a.secret.key</name><value>..</value>``.

Pure: stdlib only, no I/O, no project imports. Linear in the text.
"""

from __future__ import annotations

import re

from policy.scrub_structure import KEYED, NAMED, Span
from policy.secret_names import is_name_field, is_placeholder, is_secret_name, is_value_field

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
        blank = _BLANK.match(text, siblings[-1].end()) if siblings else None
        assert blank is not None or not siblings  # _BLANK matches the empty string
        if blank is not None and blank.end() != m.start():
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
