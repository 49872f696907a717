"""`bamboo keys list` shows rows of trust_statements that count for nothing: whoever holds the app role's database
password writes them (docs/trust-model.md), so their kind, subject and reason are hostile to the terminal. rich's
markup `escape` let their escape sequences through: a row's subject went up a line, erased the "count for nothing"
warning and wrote "registry intact" in its place. `--json` wrote a row's C1 controls and bidi overrides raw."""

from __future__ import annotations

import contextlib
import json

from typer.testing import CliRunner

from bamboo.cli import keys_cmd, store_access
from bamboo.cli.main import app
from policy.trust_root import Ignored, Registry

# ESC-based: up two lines, erase, green text; then the one-character CSI (U+009B), a bidi override, a zero-width
# space, a carriage return and a line break that would start a line of its own.
SUBJECT = ("\x1b[2A\x1b[G\x1b[J\x1b[32mregistry intact: every statement signed\x1b[0m "
           "\u009b2J \u202etxt.exe\u200b\rok\nall keys pinned")
HIDDEN = ("\x1b", "\u009b", "\u202e", "\u200b", "\r")


class _Registry:
    async def registry(self) -> Registry:
        return Registry(ignored=(Ignored(statement_id="3333", kind="register_key\x1b[8m", subject=SUBJECT,
                                         reason="not a trust statement\u202e"),))


@contextlib.asynccontextmanager
async def _store(_settings):
    yield object()


def _keys_list(monkeypatch, *args: str) -> str:
    monkeypatch.setattr(store_access, "opened_store", _store)
    monkeypatch.setattr(keys_cmd, "_registry", lambda store: _Registry())
    out = CliRunner().invoke(app, ["keys", "list", *args], color=True)
    assert out.exit_code == 0, out.output
    return out.output


def test_a_stored_rows_text_is_spelled_out_on_one_line(monkeypatch):
    shown = _keys_list(monkeypatch)
    assert not [char for char in HIDDEN if char in shown]
    assert "⟨U+001B⟩[2A" in shown and "⟨U+009B⟩" in shown and "⟨U+202E⟩" in shown
    # The row's line break is spelled, not drawn: no line of the output starts with the row's words.
    assert not [line for line in shown.splitlines() if line.startswith("all keys pinned")]


def test_the_json_listing_escapes_what_a_terminal_acts_on_and_keeps_the_text(monkeypatch):
    shown = _keys_list(monkeypatch, "--json")
    assert shown.isascii()
    assert json.loads(shown)["ignored"][0]["subject"] == SUBJECT
