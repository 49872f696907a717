"""A batch's failure lines quote what failed: a model's invalid output, a file's name. They are printed as
text, never as rich markup or terminal controls (the populate and analyze summaries interpolated them into
markup)."""

from __future__ import annotations

import io

from rich.console import Console

from bamboo.accumulation.contract import PopulateResult
from bamboo.cli import populate_cmd

HOSTILE = "[link=https://evil.example]ok[/link] \x1b]8;;https://evil.example\x07click\x1b]8;;\x07"


def test_a_populate_failure_is_printed_inert(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(populate_cmd, "console", Console(file=out, width=300, force_terminal=False))
    result = PopulateResult.model_validate({"batch_id": "b", "total": 1, "done": 0, "failed": 1, "skipped": 0, "cancelled": False,
                                            "failures": [{"index": 0, "source": "incident-1.json",
                                                                           "reason": HOSTILE}]})
    populate_cmd.print_result(result)
    text = out.getvalue()
    assert "[link=https://evil.example]ok[/link]" in text and "\x1b" not in text and "\x07" not in text
    assert "⟨U+001B⟩" in text
