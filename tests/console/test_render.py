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


def test_more_distinct_hidden_characters_than_placeholders_rewrite_no_real_character():
    """Each distinct hidden character got a placeholder U+E000 + n; past the 6,400 of the private-use area they
    ran into printable characters (U+F900 on), and the final replace rewrote those where the code itself used
    them: "ﬁle" (U+FB01) showed as a spelled-out invisible character. Such code is shown unhighlighted."""
    hidden = "".join(chr(0x40000 + i) for i in range(0xFB01 - 0xE000 + 1))  # unassigned: each one is spelled out
    code = f"# {hidden}\nname = 'ﬁle'  # U+FB01, printable\nx = '\u200b'\n"
    html = str(code_html(code, {2}))
    lines = _lines(html)
    assert sorted(lines) == [1, 2, 3]
    assert "name = 'ﬁle'" in lines[2].replace("&#39;", "'") and "⟨U+200B⟩" in lines[3] and "\u200b" not in html
    assert "⟨U+40000⟩" in lines[1] and "⟨U+41B01⟩" in lines[1] and not any(0xE000 <= ord(c) <= 0xF8FF for c in html)
    highlighted = re.search(r'<span class="hll">(.*?)\n</span>', html, re.DOTALL).group(1)
    assert 'class="linenos">2<' in highlighted
    # under the limit the code is still highlighted, with one placeholder per distinct character
    assert '<span class="spelled"' in str(code_html(f"# {hidden[:6400]}\nx = 1\n"))
