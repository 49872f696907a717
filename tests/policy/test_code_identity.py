"""Code identity: formatting nothing can observe keeps the hash (blanks ending a line outside string literals,
the line-ending style, blank lines at the end); any other change, a blank line between statements included,
changes it."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policy.code_identity import HASH_HEX_LENGTH, code_hash, normalize_code, short_hash
from tests.policy.strategies import indentation, line_content, source_lines, trailing_whitespace


def _render(lines: list[tuple[str, str]]) -> str:
    return "\n".join(indent + content for indent, content in lines)


def test_normalisation_strips_only_what_nothing_can_observe() -> None:
    code = "def f():  \n\n    x = 1\t\r\n  \n    return x   \n\n"
    assert normalize_code(code) == "def f():\n\n    x = 1\n\n    return x"
    assert code_hash(code) == hashlib.sha256(b"def f():\n\n    x = 1\n\n    return x").hexdigest()


def test_a_blank_line_between_statements_is_part_of_the_identity() -> None:
    """A program can read its own line numbers: with a blank line above the `try`, the traceback says line 4,
    and this block kills. The seed's rule dropped blank lines, so both hashed alike."""
    import ast

    never_kills = ('import traceback\ntry:\n    raise ValueError("x")\nexcept ValueError:\n'
                   '    where = traceback.format_exc()\nif "line 3" not in where:\n    await tools.kill_task(task_id=1)')
    kills = never_kills.replace("\ntry:", "\n\ntry:", 1)
    ast.parse(kills)
    assert code_hash(kills) != code_hash(never_kills)


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
    blank_at_end=st.lists(st.sampled_from(["", " ", "\t  "]), max_size=3),
    line_break=st.sampled_from(["\n", "\r\n", "\r"]),
)
def test_formatting_only_changes_keep_the_hash(lines, trailing, blank_at_end, line_break) -> None:
    reformatted = [indent + content + trailing[position] for position, (indent, content) in enumerate(lines)]
    assert code_hash(line_break.join(reformatted + blank_at_end)) == code_hash(_render(lines))


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
    # tabs count to the next multiple of eight, as Python reads them: " \t" and "\t" are one indentation
    new_indent = data.draw(indentation.filter(lambda new: new.expandtabs(8) != indent.expandtabs(8)))
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


# Two programs that differ only in whitespace inside a string literal behave differently: the approver read the
# first (it never kills) and the requester's edit put in the second (it does); both hashed alike, so the
# approval of the one ran the other.
READ_AS_DRY_RUN = 'mode = """dry-run\n"""\nif mode.splitlines()[0] != "dry-run":\n    await tools.kill_task(task_id=1)'


@pytest.mark.parametrize("other", [
    READ_AS_DRY_RUN.replace("dry-run\n", "dry-run   \n", 1),  # trailing blanks on a line inside the string
    READ_AS_DRY_RUN.replace('"""dry-run\n', '"""dry-run\n\n', 1),  # a blank line inside it
    READ_AS_DRY_RUN.replace('mode = """dry-run\n"""', 'mode = "dry-run\\\n   "', 1),  # a backslash-continued one
    READ_AS_DRY_RUN.replace('mode = """dry-run\n"""', 'mode = f"""dry-run  \n{1}"""', 1),  # an f-string
])
def test_whitespace_inside_a_string_literal_is_part_of_the_identity(other: str) -> None:
    import ast

    ast.parse(other)  # each is a program that runs
    assert code_hash(other) != code_hash(READ_AS_DRY_RUN)


def test_formatting_around_a_string_literal_still_keeps_the_hash() -> None:
    assert code_hash(READ_AS_DRY_RUN) == code_hash(READ_AS_DRY_RUN.replace("\nif", "   \nif") + "  \n\n")
    text = 'x = """a\n\n  b  \n"""  \n\ny = 1'
    assert normalize_code(text) == 'x = """a\n\n  b  \n"""\n\ny = 1' and normalize_code(normalize_code(text)) == normalize_code(text)


def test_blanks_ending_a_line_inside_a_string_literal_are_a_hazard_the_review_names() -> None:
    from policy.code_hazards import HazardKind, find_hazards

    swapped = READ_AS_DRY_RUN.replace("dry-run\n", "dry-run   \n", 1)
    assert [(h.kind, h.line) for h in find_hazards(swapped)] == [(HazardKind.UNUSUAL_WHITESPACE, 1)]
    assert find_hazards(READ_AS_DRY_RUN + "   ") == []  # blanks after the code are formatting


def test_hashing_stays_total_for_code_python_cannot_read() -> None:
    for text in ('x = """\ud800\n"""', 'x = """a"""\ny = ' + "(" * 100_000 + ")" * 100_000, 'x = """a\n"""\n\0'):
        assert len(code_hash(text)) == HASH_HEX_LENGTH


def test_the_normal_form_draws_the_lines_and_blocks_python_reads() -> None:
    """The normal form is what the review shows and the sandbox runs. A form feed in a line's indentation
    resets it to column 0 for Python, while every view drew the line inside the block above (a kill under a
    branch that is never taken ran every time); a lone carriage return ends a line for Python, while views drew
    the call after it as part of a comment."""
    import ast

    fed = 'if task["status"] == "none":\n    print("unreachable")\n    \fawait tools.kill_task(task_id)\nreturn 1'
    shown = normalize_code(fed)
    assert shown == 'if task["status"] == "none":\n    print("unreachable")\nawait tools.kill_task(task_id)\nreturn 1'
    parse = lambda text: ast.dump(ast.parse(text, feature_version=(3, 11)))  # noqa: E731
    assert parse(shown) == parse(fed)
    inside = 'text = """a\n  \fb"""\nif x:\n  y = 1\n  \f  z = 2'  # a form feed inside a string is its text
    assert normalize_code(inside) == 'text = """a\n  \fb"""\nif x:\n  y = 1\n  z = 2' and parse(normalize_code(inside)) == parse(inside)
    carriage = "task = await tools.get_task(task_id)  # not kill_task\rawait tools.kill_task(task_id)"
    assert normalize_code(carriage).split("\n")[1] == "await tools.kill_task(task_id)"


def test_indentation_is_drawn_as_python_reads_it() -> None:
    """Tabs drawn four wide (or after a view's gutter) put a kill Python runs as a sibling of "if not dry_run:"
    inside that branch, in every view; and a line holding only a continuation backslash gives the statement
    after it its indentation, which every view drew from the next line. The normal form writes indentation as
    Python reads it."""
    import ast

    parse = lambda text: ast.dump(ast.parse(text))  # noqa: E731
    tabs = ("dry_run = True\nif True:\n\t   \t \tif not dry_run:\n\t   \t \t\tprint(1)\n"
            "    \t\t\tawait tools.kill_task(task_id=7)")
    lines = normalize_code(tabs).split("\n")
    assert lines[2] == " " * 24 + "if not dry_run:" and lines[4] == " " * 24 + "await tools.kill_task(task_id=7)"
    assert parse(normalize_code(tabs)) == parse(tabs)
    backslash = "if True:\n    if not dry_run:\n        print(1)\n    \\\n        await tools.kill_task(task_id=7)"
    assert normalize_code(backslash).split("\n")[3] == "    await tools.kill_task(task_id=7)"
    assert parse(normalize_code(backslash)) == parse(backslash)
    inside = 'x = """\n\t\\\n  y"""'  # in a string, tabs and a lone backslash are its text
    assert normalize_code(inside) == inside


def test_the_normal_form_is_its_own_normal_form_when_stripping_makes_text_parse() -> None:
    # One pass left a last line of a lone backslash (it no longer parses) and the next pass stripped inside the
    # string: the review showed one text and judged the other's hash.
    text = 'x = """q  \n"""\n\\\n\f'
    once = normalize_code(text)
    assert normalize_code(once) == once and code_hash(once) == code_hash(text)


def test_runs_of_continuation_backslashes_keep_the_blocks_python_reads() -> None:
    """A line holding only a backslash gives the statement after it its indentation, unless it stands in
    column 0 (then the next line's counts); generated runs of them, at every indentation, with form feeds and
    tabs, parse to the same program before and after normalising."""
    import ast
    import random

    rng = random.Random(30)
    indents = ["", "  ", "    ", "        ", "\t", "\f", "  \f", "\f    ", " \t"]
    checked = 0
    for _ in range(3000):
        lines = ["if x:", "    if w:", "        y()"]
        lines += [rng.choice(indents) + "\\" for _ in range(rng.randint(1, 3))]
        lines += [rng.choice(indents) + "z()", rng.choice(["", "    q()", "r()"])]
        text = "\n".join(lines)
        try:
            before = ast.dump(ast.parse(text))
        except SyntaxError:
            continue
        checked += 1
        assert ast.dump(ast.parse(normalize_code(text))) == before, repr(text)
    assert checked > 1000


def test_a_stray_backslash_before_a_blank_line_does_not_switch_the_normal_form_off() -> None:
    """Python reads a lone backslash before a blank line as a blank line; ``tokenize`` raised on it, and the
    normalisation then gave the text back unchanged, tabs and all: the kill drawn inside "if not dry_run:"
    (tabs four wide) ran as its sibling again."""
    tabs = ("dry_run = True\nif True:\n\t   \t \tif not dry_run:\n\t   \t \t\tprint(1)\n"
            "    \t\t\tawait tools.kill_task(task_id=7)\n  \\\n\nreturn {}")
    assert "\t" not in normalize_code(tabs)
    assert normalize_code(tabs).split("\n")[4] == " " * 24 + "await tools.kill_task(task_id=7)"



def test_a_text_ending_in_a_lone_continuation_has_one_normal_form():
    """Found by the property above: a lone backslash line joined with the blank line after it vanished, so '\\'
    and '\\' plus a line break (one formatting apart) had two normal forms."""
    assert code_hash("\\\n") == code_hash("\\") == code_hash("")
    assert code_hash("x = 1\n\\\n\n") == code_hash("x = 1\n\\") == code_hash("x = 1")
    assert normalize_code("if x:\n    \\\n    y\n") == "if x:\n    y"  # a continuation that continues something
