"""Code identity: formatting-only changes keep the hash; any change to a non-blank line changes it."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from policy.code_identity import HASH_HEX_LENGTH, code_hash, normalize_code, short_hash
from tests.policy.strategies import indentation, line_content, source_lines, trailing_whitespace


def _render(lines: list[tuple[str, str]]) -> str:
    return "\n".join(indent + content for indent, content in lines)


def test_normalisation_matches_the_seed_rule() -> None:
    code = "def f():  \n\n    x = 1\t\r\n  \n    return x   \n\n"
    assert normalize_code(code) == "def f():\n    x = 1\n    return x"
    assert code_hash(code) == hashlib.sha256(b"def f():\n    x = 1\n    return x").hexdigest()


def test_comments_are_part_of_the_identity() -> None:
    assert code_hash("x = 1  # read") != code_hash("x = 1  # kill")


def test_hash_shape_and_short_form() -> None:
    digest = code_hash("await tools.get_task(1)")
    assert len(digest) == HASH_HEX_LENGTH and set(digest) <= set("0123456789abcdef")
    assert short_hash(digest) == digest[:12]


def test_form_feed_is_not_a_line_break() -> None:
    # Python does not end a logical line at a form feed, so it must not split lines for identity either.
    assert code_hash("a = 1\fb = 2") != code_hash("a = 1\nb = 2")


def test_lone_surrogates_do_not_break_hashing() -> None:
    assert len(code_hash("x = '\ud800'")) == HASH_HEX_LENGTH


@given(
    lines=source_lines,
    trailing=st.lists(trailing_whitespace, min_size=12, max_size=12),
    blank_after=st.lists(st.sampled_from(["", " ", "\t  ", None]), min_size=12, max_size=12),
    line_break=st.sampled_from(["\n", "\r\n", "\r"]),
    leading_blank=st.booleans(),
)
def test_formatting_only_changes_keep_the_hash(lines, trailing, blank_after, line_break, leading_blank) -> None:
    reformatted: list[str] = ["   "] if leading_blank else []
    for position, (indent, content) in enumerate(lines):
        reformatted.append(indent + content + trailing[position])
        if blank_after[position] is not None:
            reformatted.append(blank_after[position])
    assert code_hash(line_break.join(reformatted)) == code_hash(_render(lines))


@given(lines=source_lines, data=st.data())
def test_changing_a_line_content_changes_the_hash(lines, data) -> None:
    position = data.draw(st.integers(0, len(lines) - 1))
    indent, content = lines[position]
    replacement = data.draw(line_content.filter(lambda new: new != content))
    changed = [*lines[:position], (indent, replacement), *lines[position + 1 :]]
    assert code_hash(_render(changed)) != code_hash(_render(lines))


@given(lines=source_lines, data=st.data())
def test_changing_a_line_indentation_changes_the_hash(lines, data) -> None:
    position = data.draw(st.integers(0, len(lines) - 1))
    indent, content = lines[position]
    new_indent = data.draw(indentation.filter(lambda new: new != indent))
    changed = [*lines[:position], (new_indent, content), *lines[position + 1 :]]
    assert code_hash(_render(changed)) != code_hash(_render(lines))


@given(lines=source_lines, data=st.data())
def test_adding_or_removing_a_non_blank_line_changes_the_hash(lines, data) -> None:
    position = data.draw(st.integers(0, len(lines)))
    extra = (data.draw(indentation), data.draw(line_content))
    added = [*lines[:position], extra, *lines[position:]]
    assert code_hash(_render(added)) != code_hash(_render(lines))


@given(st.text())
def test_normalisation_is_idempotent_and_total(text: str) -> None:
    once = normalize_code(text)
    assert normalize_code(once) == once
    assert code_hash(once) == code_hash(text)
