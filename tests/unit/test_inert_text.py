"""The sanitisers for model-written text: whatever the model writes comes out of them as characters to read,
never as something a terminal, rich or Mattermost's Markdown would act on.

Issue 24: a summary starting with ``ESC c`` cleared the approver's terminal and drew a fake read-only review
over the real state-changing panel; the Mattermost post pasted it raw (links, images, a fence that swallowed
the tools line).
"""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from rich.console import Console

from bamboo.frontends.inert_text import (
    inert_markdown, inert_markup, inert_rich, inert_terminal, markdown_code, markdown_quote,
)

ESCAPES = {
    "RIS (ESC c) clears the screen": "\x1bc",
    "CSI erase display": "\x1b[2J",
    "CSI cursor home": "\x1b[H",
    "OSC 8 hyperlink": "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "OSC title ending in BEL": "\x1b]0;owned\x07",
    "DCS": "\x1bPq#0;2;0;0;0\x1b\\",
    "bare ESC x": "\x1b7\x1b8",
    "C1 CSI": "\x9b31m",
    "C1 OSC": "\x9d8;;http://evil\x9c",
    "DEL and backspace over text": "approve\x08\x08\x08\x7f",
    "carriage return overprints": "STATE-CHANGING\rread-only     ",
    "bidi override": "\u202eesrever\u202c",
    "bidi isolates": "\u2066a\u2067b\u2068c\u2069",
    "zero width and BOM": "a\u200bb\u200c\u200d\u200e\u200f\ufeffc",
    "line and paragraph separators": "a\u2028b\u2029c",
    "variation selectors carrying hidden text": "x\ufe00\ufe0f\U000e0100",
    "Hangul filler": "\u3164",
    "Mongolian free variation selectors": "CERN-PROD\u180b\u180c\u180d\u180f",
    "symbol for newline (Mattermost draws a line break)": "a\u2424b",
}


def _hidden(char: str) -> bool:
    """An independent statement of what must never reach a display as itself."""
    code = ord(char)
    return (code < 0x20 and char != "\n") or 0x7F <= code <= 0x9F or unicodedata.category(char) in ("Cf", "Zl", "Zp") \
        or 0x200B <= code <= 0x200F or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069 or code == 0xFEFF


def test_every_escape_and_invisible_character_is_spelled_out() -> None:
    for what, text in ESCAPES.items():
        shown = inert_terminal(text)
        assert not [c for c in shown if _hidden(c) or c == "\t"], what
        assert "⟨U+" in shown, what
    assert inert_terminal("\x1bc").startswith("⟨U+001B⟩c")
    assert inert_terminal("\x9b31m") == "⟨U+009B⟩31m"
    assert inert_terminal("\u202eevil") == "⟨U+202E⟩evil"


def test_newlines_stay_tabs_expand_and_one_line_spells_the_break() -> None:
    assert inert_terminal("a\tb\r\nc") == "a   b\nc"
    assert inert_terminal("a\nb", one_line=True) == "a⏎b"
    assert inert_terminal("plain text, unchanged: ünïcode ✓") == "plain text, unchanged: ünïcode ✓"


def test_rich_markup_is_escaped_or_never_parsed() -> None:
    text = "[bold red]read-only[/] [link=http://evil]x[/link] :white_check_mark: \x1b[2J"
    console = Console(record=True, color_system=None, width=200)
    console.print(f"said: {inert_markup(text)}")
    console.print(inert_rich(text))
    shown = console.export_text()
    assert shown.count("[bold red]read-only[/]") == 2 and shown.count("[link=http://evil]x[/link]") == 2
    assert "⟨U+001B⟩[2J" in shown and "\x1b" not in shown
    assert ":white_check_mark:" in shown  # as text: a Text is never searched for emoji codes


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_terminal_output_never_carries_a_control_or_invisible_character(text: str) -> None:
    for shown in (inert_terminal(text), inert_terminal(text, one_line=True), inert_markup(text), inert_markdown(text),
                  markdown_code(text)):
        bad = [c for c in shown if _hidden(c) or c == "\t"]
        assert not bad, (text, shown, bad)
    assert "\n" not in inert_terminal(text, one_line=True) and "\n" not in markdown_code(text)
    assert "\n" not in inert_markdown(text, one_line=True)


HOSTILE_MARKDOWN = {
    "link": "[click](http://evil.example/)",
    "image": "![x](http://evil.example/img.png)",
    "reference link": "[click][1]\n\n[1]: http://evil.example/",
    "autolink": "<http://evil.example/>",
    "bare url": "see http://evil.example/ and www.evil.example and evil.example/path",
    "e-mail": "mail root@evil.example",
    "fence": "```\nswallowed\n```",
    "tilde fence": "~~~\nswallowed",
    "indented code": "    code",
    "heading": "# HEADING",
    "setext heading": "Verdict\n===",
    "rule": "---",
    "quote": "> quoted",
    "list": "- item\n1. item",
    "table": "| a | b |\n|---|---|\n| c | d |",
    "html": "<img src=x onerror=alert(1)><b>bold</b>",
    "emphasis": "**bold** _em_ ~~struck~~",
    "mentions": "@channel @here @all @alice",
    "channel link": "~town-square",
    "emoji": ":white_check_mark: :)",
    "inline latex": "$x$",
}


def _rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def test_markdown_opens_nothing_and_reads_the_same() -> None:
    for what, text in HOSTILE_MARKDOWN.items():
        raw = inert_markdown(text)
        html = _rendered(raw)
        for tag in ("<a ", "<img", "<h", "<pre", "<code", "<blockquote", "<ul", "<ol", "<table", "<hr", "<strong",
                    "<em", "<s>", "<del"):
            assert tag not in html, (what, raw, html)
        assert "@" not in raw and "```" not in raw and "~~" not in raw and "<" not in raw, (what, raw)
        assert not re.search(r"[a-z]:/", raw) and not re.search(r"(?<!\\)\.", raw), (what, raw)  # dots escaped
        assert not re.search(r":[a-z_]+:", raw), (what, raw)
        # Apart from the visible mention spelling, a reader sees the text the model wrote (leading blanks aside).
        shown = re.sub(r"<[^>]+>", "", html).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<") \
            .replace("&gt;", ">")
        expected = "\n".join(line.lstrip(" ") for line in text.split("\n")).replace("@", "(at)")
        assert re.sub(r"\s+", " ", shown).strip() == re.sub(r"\s+", " ", expected).strip(), what


def test_ordinary_words_stay_readable_in_the_raw_post() -> None:
    assert inert_markdown('run ok: {"killed": true}') == 'run ok: {"killed": true}'
    assert inert_markdown("bob chose run_once for kill_task") == "bob chose run_once for kill_task"


def test_a_quote_cannot_take_the_next_line_in() -> None:
    post = markdown_quote("line one\nline two\n```\n# x") + "\ntools: kill_task"
    html = _rendered(post)
    assert html.count("<blockquote>") == 1 and html.rstrip().endswith("<p>tools: kill_task</p>")
    assert "<pre" not in html and "<h1" not in html


def test_no_renderer_draws_a_line_break_the_text_does_not_hold() -> None:
    """Mattermost's Markdown turns the symbol for newline into a line break before it parses anything: in a code
    view a comment so written drew a numbered code line that Python never sees; in a code span it ended the span
    and the rest was live Markdown (an image that loads when the post is read)."""
    from bamboo.frontends.mattermost.render import numbered

    code = "tid = 31337  # note\u2424   2 \u2502 tid = task_id\nr = await tools.kill_task(task_id=tid)"
    for shown in (numbered(code), markdown_code('{"a": "x\u2424![b](https://evil.example/b.png)"}'),
                  inert_terminal(code), inert_markdown(code)):
        assert "\u2424" not in shown and "2424⟩" in shown, shown
    assert len(re.findall(r"(?m)^[ ▶]\s*\d+ │", numbered(code))) == 2  # two numbered lines, as the code has


def test_a_code_span_cannot_end_early_or_mention_anyone() -> None:
    span = markdown_code('get_task_details({"x": "`@channel` \x1b[2J"})')
    assert span.count("`") == 2 and "@" not in span and "(at)channel" in span and "⟨U+0060⟩" in span
    assert "⟨U+001B⟩" in span
    assert _rendered(span).count("<code>") == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("[]()<>!#*_`~-=+|.:@$&\\/ \nhtpsw.ex") + ["http://", "www.", "    ", "```"]),
                max_size=40).map("".join))
def test_no_markdown_construct_survives_any_arrangement_of_metacharacters(text: str) -> None:
    html = _rendered(markdown_quote(text) + "\ntrusted line")
    for tag in ("<a ", "<img", "<h1", "<h2", "<h3", "<pre", "<code", "<ul", "<ol", "<table", "<hr", "<strong",
                "<em", "<s>"):
        assert tag not in html, (text, html)
    assert html.count("<blockquote>") == 1 and html.rstrip().endswith("<p>trusted line</p>")
    raw = inert_markdown(text)
    assert "@" not in raw and "<" not in raw and not re.search(r"[a-z]:[^\s]", raw)
    assert not re.search(r"(?<!\\)\.", raw)


def test_markdown_on_one_line_writes_its_line_breaks_visibly() -> None:
    """A field a post shows on one line of its own ("Chosen by: <the model's reason>") kept the reason's line
    breaks, and the reason drew lines of its own that read like the post's: a stored "Resolution" and an
    operator's confirmation no one gave."""
    reason = ("clue err_x points at cause_b\nResolution (stored, from 3 incident(s): INC-1): kill task 42\r\n"
              "Chosen by: an operator @here :white_check_mark:")
    shown = inert_markdown(reason, one_line=True)
    assert "\n" not in shown and "\r" not in shown and shown.count("⏎") == 2
    first, *rest = _rendered("Chosen by: " + shown + "\ntrusted line").split("\n")
    assert "Resolution (stored" in first and "Chosen by: an operator" in first and rest[0] == "trusted line</p>"
    assert "@" not in shown and not re.search(r":[a-z_]+:", shown)
    assert inert_markdown("two\nlines") == "two\nlines"  # without one_line a line break stays a line break
