"""Code identity: which code blocks count as "the same code" for review policies and grants.

A session policy or a durable grant is a statement about one exact piece of logic. Two blocks that differ
only in formatting nothing can observe (blanks ending a line, the line-ending style, blank lines after the
last line) must share that statement, and any change to what a line says, including its indentation (which
changes Python's meaning), must not. The normalisation is therefore textual and deliberately small:
per-line trailing whitespace is stripped, trailing blank lines are dropped, and everything else is kept.
Comments are not stripped: a changed comment is a new hash, which errs in the safe direction.

Two things that look like formatting are not:

- Whitespace inside a string literal: a triple-quoted ``dry-run`` followed by a line break, and the same with
  three spaces after ``dry-run``, are two programs (one compares equal to "dry-run", the other does not).
  Lines that end inside a string literal are kept exactly as written.
- Blank lines between statements: a program can read its own line numbers (a formatted traceback says
  "line 3"), so a blank line added above a condition on them turns a block that never kills into one that
  does. The seed's rule dropped blank lines; both cases hashed alike, and an approval of the block the
  approver read ran the other (a requester's edit keeps the turn). Blank lines are kept: one more review
  when a model reformats, the safe direction.

The normalised text is also the text that is shown, judged and run (the workflow and the review read it, the
sandbox runs it), so its lines and blocks must be the ones Python reads. Each of these drew code where Python
does not run it (a kill drawn in a comment or under a branch never taken ran every time): a lone carriage
return (a line break to Python), a form feed in a line's indentation (Python counts the indentation from it),
tabs in it (Python counts to the next multiple of eight; views drew them four wide, or after a gutter), and a
line holding only a continuation backslash (Python takes the statement's indentation from it). The normal form
writes each as Python reads it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re

HASH_HEX_LENGTH = 64
# Indentation up to and including its last form feed, which Python's tokenizer counts from column 0.
_FORM_FEED_INDENT = re.compile(r"^[ \t\f]*\f")
# Passes of normalisation at most: one almost always; a second when stripping made the text parse.
MAX_NORMALISING_PASSES = 4


def normalize_code(code: str) -> str:
    """Return the text whose SHA-256 identifies ``code``.

    ``\\r\\n`` and lone ``\\r`` are read as line breaks so that a block pasted from another system keeps its
    identity (Python reads them so too). Other characters that ``str.splitlines`` would treat as breaks (form
    feed, Unicode separators) are not breaks here: Python does not end a logical line at them, so treating
    them as breaks would let two different programs share a hash. Per-line trailing whitespace is stripped,
    except on lines that end inside a string literal, and blank lines after the last line are dropped.

    Indentation is written as Python reads it, so every view draws the blocks Python runs: up to its last form
    feed it is dropped (Python counts it from there), tabs in it become spaces to the next multiple of eight
    (a view drawing tabs four wide, or after a gutter, put a line Python runs as a sibling inside the block
    above it), and a line holding only a continuation backslash is joined with the next (Python takes the
    statement's indentation from the backslash's line, and a view drew the next line's). Idempotent, repeated
    to its fixed point (stripping can make text parse that did not, which moves what is inside a string): the
    text it returns is its own normal form, which is what the review shows and judges and the sandbox runs.
    """
    text = code.replace("\r\n", "\n").replace("\r", "\n")
    for _ in range(MAX_NORMALISING_PASSES):
        once = _normalised_once(text)
        if once == text:
            break
        text = once
    return text


def _normalised_once(unified: str) -> str:
    inside = lines_ending_in_strings(unified)
    kept = []
    for number, line in enumerate(unified.split("\n"), start=1):
        if number not in inside:
            line = line.rstrip()
        if number - 1 not in inside:  # it starts outside a string: its indentation is Python's
            line = _indentation_as_read(line)
        kept.append(line)
    return "\n".join(_without_trailing_blank_lines(_backslash_lines_joined(kept, inside)))


def _backslash_lines_joined(lines: list[str], inside: frozenset[int]) -> list[str]:
    """Each run of lines holding only a continuation backslash joined with the line after it, indented as Python
    indents that statement: from the first line of the run indented at all, else from the line after it (a
    lone backslash in column 0 leaves the indentation to the next line). One pass over the lines."""
    joined: list[str] = []
    index = 0
    while index < len(lines):
        end = index
        while end < len(lines) and lines[end].strip() == "\\" and not _in_a_string(end + 1, inside):
            end += 1
        if end == index:  # no run here
            joined.append(lines[index])
            index += 1
            continue
        if not any(lines[end:]):  # the text ends in the run, or in it and blank lines: it continues nothing
            # Dropped either way: joined with a blank line after it, it vanished, so "\\" and "\\\n" (one
            # formatting apart) had two normal forms; a program ending so does not parse, and what runs is this.
            index = end
            continue
        indents = [_indent(line) for line in lines[index:end]]
        chosen = next((indent for indent in indents if indent), _indent(lines[end]))
        joined.append(chosen + lines[end].lstrip(" \t\f"))
        index = end + 1
    return joined


def _in_a_string(number: int, inside: frozenset[int]) -> bool:
    """Line ``number`` (1-based) starts or ends inside a string literal."""
    return number - 1 in inside or number in inside


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" "))]


def _without_trailing_blank_lines(lines: list[str]) -> list[str]:
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _indentation_as_read(line: str) -> str:
    """``line`` with its indentation as Python's tokenizer reads it: from its last form feed, tabs to eight."""
    line = _FORM_FEED_INDENT.sub("", line)
    body = line.lstrip(" \t")
    indent = line[:len(line) - len(body)]
    return indent.expandtabs(8) + body if "\t" in indent else line


@functools.lru_cache(maxsize=32)  # one review hashes its code and reads its hazards: parsed once
def lines_ending_in_strings(code: str) -> frozenset[int]:
    """The (1-based) numbers of the lines whose end lies inside a string literal (or between the parts of one
    written over several lines). Empty for code Python cannot parse (it never runs, so nothing hides in its
    formatting).

    Read from Python's own parse, not from ``tokenize``: the two disagree on some text Python runs (a lone
    backslash before a blank line is a blank line to Python and an indentation error to ``tokenize``), and the
    normalisation gave up on such text, tabs and all, so one stray line switched it off."""
    if '"""' not in code and "\'\'\'" not in code and "\\\n" not in code:
        return frozenset()  # only a triple-quoted or a backslash-continued string spans lines (most code has neither)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the sandbox parses it so too: it never runs
        return frozenset()
    inside: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.JoinedStr, ast.Constant)):
            continue
        literal = isinstance(node, ast.JoinedStr) or isinstance(node.value, (str, bytes))
        if literal and node.end_lineno is not None and node.end_lineno > node.lineno:
            inside.update(range(node.lineno, node.end_lineno))
    return frozenset(inside)


def code_hash(code: str) -> str:
    """SHA-256 (lowercase hex) of the normalised code; the key of session policies and grants.

    ``surrogatepass`` keeps the function total: text decoded elsewhere with lone surrogates still has a
    stable identity instead of raising halfway through a review.
    """
    return hash_of_normal_form(normalize_code(code))


def hash_of_normal_form(normal: str) -> str:
    """``code_hash`` of code whose normal form ``normal`` already is (normalising twice is the same text, at
    twice the cost on a large block)."""
    return hashlib.sha256(normal.encode("utf-8", "surrogatepass")).hexdigest()


def short_hash(full_hash: str, length: int = 12) -> str:
    """The prefix shown to operators (review prompts, ``/approvals``); long enough to type, short to read."""
    return full_hash[:length]


def logic_hash(code: str) -> str:
    """SHA-256 of what ``code`` says to Python: its syntax tree without positions, so formatting and comments
    do not count. Two captures of one procedure with the same logic hash are the same procedure (one stored
    body, its frequency and incidents growing); code that does not parse falls back to ``code_hash``.

    Used only to de-duplicate captures, never to key a permission: a session policy or a grant stays bound to
    ``code_hash``, and a capture equivalent to the stored body keeps the stored text, the one people reviewed.
    """
    try:
        tree = ast.parse(code.replace("\r\n", "\n").replace("\r", "\n"))
    except (SyntaxError, ValueError):
        return "text:" + code_hash(code)
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode("utf-8", "surrogatepass")).hexdigest()
