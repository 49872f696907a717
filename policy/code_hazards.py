"""What a reviewer could miss in code shown to them: the facts every review view must point out.

The code a person approves is the code that is hashed and run, character for character. A terminal or a web
page can hide part of it: a line longer than the panel, a statement pushed far to the right by spaces after
a semicolon, a bidirectional-override or zero-width character that reorders or hides text, a Cyrillic letter
that looks Latin. These checks find such places so that every front end flags them next to the code, and
``visible`` renders the code with every invisible or unusual character spelled out. Pure and deterministic.

``hidden`` is the one rule for which characters are spelled out; every front end's rendering of model-written
text (``bamboo.frontends.inert_text``) uses ``visible`` too, so code and prose are spelled the same way.
"""

from __future__ import annotations

import ast
import io
import tokenize
import unicodedata
from enum import Enum

from pydantic import BaseModel, ConfigDict

from policy.code_identity import lines_ending_in_strings

LONG_LINE = 100
WIDE_GAP = 8


class HazardKind(str, Enum):
    LONG_LINE = "long_line"
    SEVERAL_STATEMENTS = "several_statements"
    WIDE_GAP = "wide_gap"
    TAB = "tab"
    INVISIBLE = "invisible_character"
    UNUSUAL_WHITESPACE = "unusual_whitespace"
    NON_ASCII = "non_ascii"
    CONTROL = "control_character"


class Hazard(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: HazardKind
    line: int
    detail: str


# Format characters (Cf: bidi controls, zero-width joiners, BOM) and separators hide or reorder text.
_INVISIBLE_CATEGORIES = {"Cf", "Zl", "Zp"}
# Characters of other categories that draw nothing: the combining grapheme joiner, Hangul fillers, Khmer inherent
# vowels, the blank Braille pattern, and variation selectors (a run of them after a letter can carry hidden text),
# the Mongolian free variation selectors among them. And one a display acts on: the symbol for newline, which
# Mattermost's Markdown turns into a line break before parsing (a comment so written drew a code line that
# Python never sees, and ended a code span so that the rest was live Markdown).
_INVISIBLE_EXTRA = frozenset({0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0,
                              0x180B, 0x180C, 0x180D, 0x180F, 0x2424,
                              *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)})


def _invisible(char: str) -> bool:
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or ord(char) in _INVISIBLE_EXTRA


def hidden(char: str) -> bool:
    """Whether ``char`` is one a reader could not see or that a display would act on rather than draw: controls
    (C0, C1, DEL, ESC), format characters (bidi overrides and isolates, zero-width characters, BOM), line and
    paragraph separators, whitespace other than a space, unassigned and private-use code points, and the
    characters of other categories that draw nothing. Newline and tab are not hidden."""
    if char in "\n\t":
        return False
    return not char.isprintable() or _invisible(char) or (char.isspace() and char != " ")


def _spelled(char: str) -> str:
    name = unicodedata.name(char, "unnamed")
    return f"U+{ord(char):04X} {name}"


def visible(code: str) -> str:
    """The code with every hidden character (``hidden``) written as ``⟨U+200B⟩`` (its code point) (tabs stay tabs;
    lines stay lines), for display only: the hashed code is unchanged."""
    return "".join(f"⟨U+{ord(char):04X}⟩" if hidden(char) else char for char in code)


def find_hazards(code: str) -> list[Hazard]:
    """Every place in ``code`` a reviewer might misread, in line order."""
    found: list[Hazard] = []
    lines = code.replace("\r\n", "\n").split("\n")
    for number, line in enumerate(lines, start=1):
        found.extend(_line_hazards(number, line))
    found.extend(_statement_hazards(code))
    found.extend(_blanks_ending_string_lines(code.replace("\r\n", "\n")))
    found.extend(_folded_names(code))
    return sorted(found, key=lambda h: (h.line, h.kind.value))


def _folded_names(code: str) -> list[Hazard]:
    """Names Python reads as another spelling (it folds identifiers to NFKC): "ᵈʳʸ_ʳᵘⁿ = False" sets dry_run,
    while every view shows a name of its own and only "non-ASCII character" was said. ``tokenize`` does not know
    every character Python accepts in a name (U+FE4F, a wavy low line, splits "dry﹏run" into three tokens), so
    touching name and error tokens are read as one name when Python would read them so; and on 3.11 an f-string
    is one token, its replacement fields unread, so every name-like run in a non-ASCII f-string is read too
    (its literal text with them: a note too many, the safe direction)."""
    if code.isascii():
        return []
    found = []
    run: list[tokenize.TokenInfo] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type in (tokenize.NAME, tokenize.ERRORTOKEN) and (not run or run[-1].end == token.start):
                run.append(token)
                continue
            found += _folded("".join(t.string for t in run), run[0].start[0]) if run else []
            run = [token] if token.type in (tokenize.NAME, tokenize.ERRORTOKEN) else []
            if token.type == tokenize.STRING and not token.string.isascii() and _is_f_string(token.string):
                found += [hazard for name in _name_runs(token.string) for hazard in _folded(name, token.start[0])]
    except (tokenize.TokenError, SyntaxError, ValueError):
        pass  # the names read so far; code Python cannot read never runs
    return found + (_folded("".join(t.string for t in run), run[0].start[0]) if run else [])


def _is_f_string(literal: str) -> bool:
    prefix = literal[:min((i for i in (literal.find("'"), literal.find('"')) if i >= 0), default=0)]
    return "f" in prefix.lower()


def _name_runs(text: str) -> list[str]:
    """The runs of characters Python could read as one name (a start character, then continuation ones)."""
    runs, current = [], ""
    for char in text:
        if ("a" + char).isidentifier() and (current or char.isidentifier()):
            current += char
        else:
            runs.append(current)
            current = char if char.isidentifier() else ""
    return [run for run in [*runs, current] if run]


def _folded(name: str, line: int) -> list[Hazard]:
    if not name or name.isascii() or not name.isidentifier():
        return []
    folded = unicodedata.normalize("NFKC", name)
    if folded == name:
        return []
    read = visible(folded)
    if not folded.isascii():  # it may look like the name as written (U+0387 folds to U+00B7): by code point too
        read += f" ({folded.encode('ascii', 'backslashreplace').decode()})"
    return [Hazard(kind=HazardKind.NON_ASCII, line=line,
                   detail=f"line {line}: Python reads the name {visible(name)} as {read}")]


def _blanks_ending_string_lines(code: str) -> list[Hazard]:
    """Blanks at the end of a line inside a string literal: invisible in every view, yet part of the value (a
    ``"dry-run   "`` reads as ``"dry-run"`` and compares unequal to it)."""
    lines = code.split("\n")
    return [Hazard(kind=HazardKind.UNUSUAL_WHITESPACE, line=number,
                   detail=f"line {number} ends in blank characters inside a string literal; they are part of its value")
            for number in sorted(lines_ending_in_strings(code) or ())
            if number <= len(lines) and lines[number - 1] != lines[number - 1].rstrip()]


def _line_hazards(number: int, line: str) -> list[Hazard]:
    found: list[Hazard] = []
    if len(line) > LONG_LINE:
        found.append(Hazard(kind=HazardKind.LONG_LINE, line=number,
                            detail=f"line {number} is {len(line)} characters long; read it to the end"))
    stripped = line.lstrip(" \t")
    body_start = len(line) - len(stripped)
    gap = _widest_gap(line[body_start:].rstrip())
    if gap >= WIDE_GAP:
        found.append(Hazard(kind=HazardKind.WIDE_GAP, line=number,
                            detail=f"line {number} has {gap} blank characters inside it; text may be pushed out of view"))
    if "\t" in line:
        found.append(Hazard(kind=HazardKind.TAB, line=number, detail=f"line {number} contains a tab"))
    seen: set[str] = set()
    for char in line:
        if char in seen or char in "\t":
            continue
        seen.add(char)
        category = unicodedata.category(char)
        if _invisible(char):
            kind, what = HazardKind.INVISIBLE, "an invisible character"
        elif category == "Cc":
            kind, what = HazardKind.CONTROL, "a control character"
        elif char.isspace() and char != " ":
            kind, what = HazardKind.UNUSUAL_WHITESPACE, "unusual whitespace"
        elif ord(char) > 127:
            kind, what = HazardKind.NON_ASCII, "a non-ASCII character"
        else:
            continue
        found.append(Hazard(kind=kind, line=number, detail=f"line {number} contains {what}: {_spelled(char)}"))
    return found


def _widest_gap(text: str) -> int:
    widest = run = 0
    for char in text:
        run = run + 1 if char in " \t" else 0
        widest = max(widest, run)
    return widest


def _statement_hazards(code: str) -> list[Hazard]:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    per_line: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            per_line[node.lineno] = per_line.get(node.lineno, 0) + 1
    return [
        Hazard(kind=HazardKind.SEVERAL_STATEMENTS, line=line,
               detail=f"line {line} holds {count} statements; each is part of what you approve")
        for line, count in sorted(per_line.items()) if count > 1
    ]
