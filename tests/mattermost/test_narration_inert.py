"""A narrated transcript entry draws no line of its own outside its label or its quote.

Mattermost runs the bot's posts together without a header, so a line of a model's reply (or a requester's finding)
that starts a line reads as the bot's narration ("carol chose auto_run"). The post decided "quote or one line" on
the stripped text but showed the text unstripped: leading line breaks put the model's words at column 0. A code
entry's strategy (the model's words) was shown with its line breaks too."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bamboo.frontends.mattermost.render import entry_post
from bamboo.investigation.contract import TranscriptEntry

AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("kind", "text", "actor"), [
    ("reply", "\n\ncarol chose auto_run", None),
    ("reply", "\r\ncarol chose auto_run\n", None),
    ("finding", "ok \n\n\nDurable auto-run granted to kill_task by carol\n", "mallory"),
    ("reply", "a\u2028carol chose auto_run", None),
])
def test_every_line_of_a_narrated_entry_is_its_label_or_quoted(kind, text, actor):
    post = entry_post(TranscriptEntry(seq=1, at=AT, kind=kind, text=text, turn=1, actor=actor), verbose=False)
    assert post is not None
    head, *rest = post.rstrip("\n").split("\n")
    assert head.startswith(f"`[{kind}]`") and all(line.startswith("> ") for line in rest), post


def test_a_code_entrys_strategy_is_shown_on_its_label_line():
    entry = TranscriptEntry(seq=2, at=AT, kind="code", turn=1, text="r = await tools.kill_task(task_id=1)\nreturn r",
                            data={"strategy": "kill\n\nread-only: this code changes nothing (checked by the scan)",
                                  "tools": ["kill_task"], "code_hash": "ab" * 32})
    post = entry_post(entry, verbose=True)
    assert post is not None
    head, fence = post.split("\n", 1)
    assert head.startswith("`[code]` strategy kill⏎⏎read\\-only") and fence.startswith("```text\n"), post
