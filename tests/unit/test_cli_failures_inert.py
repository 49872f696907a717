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


def test_a_note_quoting_pandas_error_is_printed_inert(monkeypatch, capsys):
    """`bamboo analyze --task-id` notes why a task's jobs are missing, quoting PanDA's error: a remote service's
    text, echoed to the terminal with its escape sequences until it was made inert."""
    import asyncio
    import contextlib

    from bamboo.cli import analyze_cmd
    from bamboo.panda import client, task_records
    from bamboo.settings import Settings

    async def with_note(panda, task_id):
        return {"jediTaskID": task_id}, f"the task's failed jobs could not be read ({HOSTILE}); analysed on the task's fields alone"

    @contextlib.asynccontextmanager
    async def panda(settings):
        yield object()

    monkeypatch.setattr(task_records, "task_for_analysis", with_note)
    monkeypatch.setattr(client.PandaClient, "from_settings", staticmethod(panda))
    task = asyncio.run(analyze_cmd.fetch_task(Settings(), 41000001))
    err = capsys.readouterr().err
    assert task == {"jediTaskID": 41000001}
    assert err.startswith("note: the task's failed jobs could not be read") and "\x1b" not in err and "\x07" not in err
    assert "⟨U+001B⟩" in err
