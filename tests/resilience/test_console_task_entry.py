"""Issue 28, finding 10, in the console: a task id is checked where it enters, as `bamboo analyze` and the
bot check it, before a session (and its PanDA reads) starts."""

from __future__ import annotations

import html

from tests.console.test_headers import _csrf, signed_in, console  # noqa: F401 — the console fixture


def test_a_task_id_out_of_range_is_refused_before_a_session_starts(console):  # noqa: F811
    app, _ = console
    bob = signed_in(app)
    answer = bob.post("/sessions/new", data={"csrf": _csrf(bob), "task_id": str(2**70)})
    text = html.unescape(answer.text)
    assert answer.status_code == 409
    assert "jediTaskID 1180591620717411303424 is out of range" in text, text[-2000:]
    assert "refused by the stand-in backend" not in text, "the backend was asked to start it"
