"""The console's code rendering: line numbers are the ones the review facts name (leading blank lines and
lone carriage returns do not shift them), and invisible characters are spelled out, as in the terminal."""

from __future__ import annotations

import re

from bamboo.frontends.console.render import code_html


def _lines(html: str) -> dict[int, str]:
    """Line number -> the text of that line, from the rendered HTML."""
    text = re.sub(r"<[^>]+>", "", str(html).replace('<span class="linenos">', "\x00"))
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"\x00(\d+)([^\x00]*)", text)}


def test_numbers_match_the_code_even_with_leading_blank_lines_and_lone_carriage_returns():
    code = "\n\nr = await tools.kill_task(task_id=task_id)\rx = 1\nreturn r"
    html = code_html(code, {3})
    lines = _lines(html)
    assert sorted(lines) == [1, 2, 3, 4]
    assert "kill_task" in lines[3] and "⟨U+000D⟩x = 1" in lines[3] and "return r" in lines[4]
    highlighted = re.search(r'<span class="hll">(.*?)\n</span>', str(html), re.DOTALL).group(1)
    assert 'class="linenos">3<' in highlighted and "kill_task" in highlighted


def test_invisible_characters_are_spelled_and_marked():
    html = str(code_html("name = 'admin\u200b'\t# \u202egnp.exe"))
    assert html.count('class="spelled"') == 2 and "⟨U+200B⟩" in html and "⟨U+202E⟩" in html
    assert "\u200b" not in html and "\u202e" not in html and "\t" in html
