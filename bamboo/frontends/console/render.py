"""Code as the console shows it: the exact hashed code, highlighted, numbered, wrapped and never cropped.

Invisible and unusual characters are spelled out by ``policy.code_hazards.visible`` (the terminal's
spelling) and marked; state-changing lines (from the review facts) are highlighted. Pygments does the
highlighting with leading and trailing blank lines kept, so the numbers are the lines the facts name.
The stylesheet wraps every line at any character and lets spaces take their room, so a statement pushed
300 columns to the right lands on a visible line instead of past the edge.

Prose the model wrote or a tool returned (summaries, replies, tool arguments and results) goes through the
templates' ``inert`` filter (``inert_filter``): invisible and control characters spelled out the same way, then
escaped by Jinja's autoescape like everything else; no template marks such text safe.

Highlighting is pure Python sized by the code (64 KiB of edited code: 0.4 s, its diff 0.25 s), and the templates
call it while the page renders, in the request handler on the console's event loop; the live pages (review,
session) render the same code again on every refresh. So the HTML is kept by what it was made from (a bounded
LRU): a refresh costs a hash, only a code's first showing costs its highlighting.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer, TextLexer

from bamboo.frontends.inert_text import inert_terminal
from policy.code_hazards import visible

_PLACEHOLDER_BASE = 0xE000  # private use: ``visible`` spells every such character, so none survives as itself
# The private-use area's size: past it a placeholder would be a printable character the code itself may hold,
# and the final replace would rewrite that character too; so text with more distinct hidden characters is shown
# spelled out but not highlighted (only hostile code has thousands of distinct invisible characters).
_PLACEHOLDERS = 0xF8FF - _PLACEHOLDER_BASE + 1
# Highlighted pages kept: by count, and by the characters of their HTML (one 64 KiB block is ~1 MB of HTML).
CACHE_ENTRIES = 256
CACHE_CHARS = 48 * 1024 * 1024


class _HtmlCache:
    """The HTML of recent renderings by (kind, SHA-256 of the text, highlighted lines), least recently used
    dropped first; a rendering larger than a quarter of the budget is not kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages: OrderedDict[tuple[str, str, tuple[int, ...]], Markup] = OrderedDict()
        self._chars = 0

    def get(self, kind: str, text: str, lines: tuple[int, ...], make: Callable[[], Markup]) -> Markup:
        key = (kind, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), lines)
        with self._lock:
            html = self._pages.get(key)
            if html is not None:
                self._pages.move_to_end(key)
                return html
        html = make()
        if len(html) > CACHE_CHARS // 4:
            return html
        with self._lock:
            if key not in self._pages:
                self._pages[key] = html
                self._chars += len(html)
            while len(self._pages) > CACHE_ENTRIES or self._chars > CACHE_CHARS:
                _, dropped = self._pages.popitem(last=False)
                self._chars -= len(dropped)
        return html

    def clear(self) -> None:
        with self._lock:
            self._pages.clear()
            self._chars = 0

    def __len__(self) -> int:
        return len(self._pages)


_html = _HtmlCache()


def _formatter(highlight_lines: set[int] | None = None) -> HtmlFormatter:
    return HtmlFormatter(linenos="inline", hl_lines=sorted(highlight_lines or ()), cssclass="code", wrapcode=True,
                         lineanchors="L", anchorlinenos=False)


def _spelled_by_placeholders(text: str) -> tuple[str, dict[str, str]] | None:
    """Each character ``visible`` would spell, replaced by one private-use placeholder, so the lexer sees
    one character where the reader will see ``⟨U+200B⟩`` (its code point) (and a lone carriage return stays on its line).
    None when the text has more distinct such characters than the private-use area has placeholders."""
    by_spelling: dict[str, str] = {}
    out = []
    for char in text:
        spelled = visible(char)
        if spelled == char:
            out.append(char)
            continue
        placeholder = by_spelling.get(spelled)
        if placeholder is None:
            if len(by_spelling) == _PLACEHOLDERS:
                return None
            placeholder = chr(_PLACEHOLDER_BASE + len(by_spelling))
            by_spelling[spelled] = placeholder
        out.append(placeholder)
    return "".join(out), {placeholder: spelled for spelled, placeholder in by_spelling.items()}


def _render(text: str, lexer, formatter: HtmlFormatter) -> Markup:
    placed = _spelled_by_placeholders(text)
    if placed is None:  # spelled out and escaped by the formatter, numbered and marked the same, not highlighted
        return Markup(highlight(visible(text), TextLexer(stripnl=False, ensurenl=True), formatter))
    prepared, placeholders = placed
    html = highlight(prepared, lexer, formatter)
    for placeholder, spelled in placeholders.items():
        html = html.replace(placeholder, f'<span class="spelled" title="an invisible or unusual character">'
                                         f'{spelled}</span>')
    return Markup(html)


def code_html(code: str, highlight_lines: set[int] | None = None) -> Markup:
    """``code`` highlighted, with its lines numbered as the review facts number them (kept: see the module)."""
    lines = tuple(sorted(highlight_lines or ()))
    return _html.get("code", code, lines, lambda: _render(code, PythonLexer(stripnl=False, ensurenl=True, tabsize=0),
                                                          _formatter(set(lines))))


def diff_html(diff: str) -> Markup:
    """``diff`` highlighted (kept: see the module)."""
    return _html.get("diff", diff, (), lambda: _render(diff, DiffLexer(stripnl=False, ensurenl=True),
                                                       HtmlFormatter(cssclass="code diff", wrapcode=True)))


def inert_filter(value: object) -> str:
    """The templates' ``inert`` filter: ``value`` as text with every hidden character spelled out (a bidi
    override cannot reorder the page, a zero-width character cannot hide a word); autoescape does the HTML."""
    return inert_terminal(str(value))


def pygments_css() -> str:
    return HtmlFormatter(style="default").get_style_defs(".code")
