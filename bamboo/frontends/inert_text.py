"""Model-written and tool-output text made inert for the place it is shown: a terminal, rich, or Markdown.

The model writes a review's summary, the replies, the code, and it quotes tool output; none of that is
trusted. Shown as it came, it can act instead of being read: a summary starting with ``ESC c`` cleared an
approver's terminal and drew a fake read-only review over the real state-changing one; in Mattermost the same
summary pasted raw carried live links, images, mentions and a code fence that swallowed the tools line.

So every front end passes such text through one function here before showing it:

- ``inert_terminal``: every character a terminal would act on or a reader could not see (C0 and C1 controls,
  ESC and so every escape sequence, DEL, bidi overrides and isolates, zero-width and other invisible
  characters) is spelled out as ``⟨U+001B⟩`` by ``policy.code_hazards.visible``, the same spelling the code
  view uses; newlines stay (or are spelled as ``⏎`` on one line) and tabs become spaces.
- ``inert_markup`` and ``inert_rich``: the same, for rich, with rich's markup escaped or not parsed at all.
- ``inert_markdown``: the same, then every Markdown metacharacter escaped (backslash escapes where
  Mattermost's renderer, a fork of marked, honours them unconditionally; HTML entities for the rest) and
  mentions neutralised visibly (``@here`` becomes ``(at)here``), so the text cannot open a link, autolink,
  image, code fence, heading, table, quote, list or HTML, nor notify anyone.

What a trusted line says (the verdict, the tools, the hash) is never built from this text; front ends show
model text in its own labelled block outside the verdict's box.
"""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text

from policy.code_hazards import visible

TAB_SIZE = 4
ONE_LINE_BREAK = "⏎"

# Characters that start Markdown syntax and that marked always honours a backslash escape for (its GFM escape
# rule): code, emphasis, links and images, headings, lists and rules, and the dots of ``www.`` and ``x.org/``.
_BACKSLASHED = frozenset("`*_[]#+-.!")
# Characters it does not: written as entities, which it passes to the HTML untouched (they draw the character
# and nothing parses them again). ``:`` followed by anything but a blank starts an autolink (``http://``), an
# emoji (``:smile:``) or an emoticon;
# ``<`` autolinks and HTML; ``&`` entities; ``=`` setext headings; ``$`` inline LaTeX; ``~`` strikethrough and
# ``~channel`` links; ``|`` tables; ``>`` quotes; ``\\`` because escaping it is conditional in marked.
_ENTITIES = {":": "&#58;", "<": "&lt;", ">": "&gt;", "&": "&amp;", "=": "&#61;", "$": "&#36;", "~": "&#126;",
             "|": "&#124;", "\\": "&#92;"}
# Mentions (``@alice``, ``@here``, ``@channel``, ``@all``) and e-mail autolinks need an ``@``: it is written
# ``(at)``, which reads the same and notifies no one.
_MENTION = "(at)"


def inert_terminal(text: str, *, one_line: bool = False) -> str:
    """``text`` with nothing a terminal acts on and nothing invisible: hidden characters spelled out as
    ``⟨U+001B⟩``, tabs expanded, CRLF read as a newline; with ``one_line`` newlines are spelled ``⏎``."""
    spelled = visible(text.replace("\r\n", "\n"))
    if one_line:
        return spelled.replace("\n", ONE_LINE_BREAK).expandtabs(TAB_SIZE)
    return "\n".join(line.expandtabs(TAB_SIZE) for line in spelled.split("\n"))


def inert_markup(text: str, *, one_line: bool = False) -> str:
    """``inert_terminal`` with rich's markup escaped, for interpolating into a rich markup string."""
    return escape(inert_terminal(text, one_line=one_line))


def inert_rich(text: str, style: str = "", *, one_line: bool = False) -> Text:
    """``inert_terminal`` as a rich ``Text``: no markup, emoji code or highlighter is applied to it."""
    return Text(inert_terminal(text, one_line=one_line), style=style)


def inert_markdown(text: str, *, one_line: bool = False) -> str:
    """``text`` as Markdown that renders as exactly these characters: inert for a terminal (its controls and
    invisible characters spelled out), every Markdown metacharacter escaped, mentions written ``(at)``, and
    each line's leading blanks dropped (four would start a code block). Newlines stay newlines; with
    ``one_line`` they are spelled ``⏎``, for a field the post shows on one line of its own (a line break there
    would let the text start a line that reads like one of the post's, e.g. a forged "Chosen by:")."""
    spelled = inert_terminal(text, one_line=one_line)  # the symbol for newline among the characters spelled out
    return "\n".join(_markdown_line(line.lstrip(" ")) for line in spelled.split("\n"))


def _markdown_line(line: str) -> str:
    out = []
    for i, char in enumerate(line):
        after = line[i + 1:i + 2]
        if char == "_" and line[i - 1:i].isalnum() and after.isalnum():
            out.append(char)  # inside a word (run_once) an underscore can neither open nor close emphasis
        elif char == ":" and (not after or after.isspace()):
            out.append(char)  # "status: ok" starts no link, emoji or emoticon
        elif char in _BACKSLASHED:
            out.append("\\" + char)
        elif char == "@":
            out.append(_MENTION)
        else:
            out.append(_ENTITIES.get(char, char))
    return "".join(out)


def markdown_code(text: str) -> str:
    """``text`` on one line as an inline code span: inert, a backtick inside spelled ``⟨U+0060⟩`` (so the
    span cannot end early and every reader agrees where it ends) and ``@`` written ``(at)`` (Mattermost's
    server finds mentions with its own idea of where code ends)."""
    inside = inert_terminal(text, one_line=True).replace("`", "⟨U+0060⟩").replace("@", _MENTION)
    return f"`{inside}`"


def markdown_quote(text: str) -> str:
    """``inert_markdown`` as a block quote, one ``> `` per line, ending with a blank line so that the next line
    of the post cannot be taken into the quote."""
    return "\n".join(f"> {line}" for line in inert_markdown(text).split("\n")) + "\n"
