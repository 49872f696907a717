"""`bamboo exec run` shows what a command printed as text to read: a server's or a tool's output is not trusted
(issue 24, item 5: escape sequences in shown text cleared an approver's terminal)."""

from __future__ import annotations

from bamboo.cli.common import console
from bamboo.cli.exec_cmd import show_result
from bamboo.executors.contract import ExecResult

HOSTILE = "ok\x1bc\x1b[2J\x9b2J \x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\ \u202eevil\u202c [bold]x[/bold]\n"


def test_command_output_is_shown_inert():
    outcome = {"exit_code": 0, "stdout": HOSTILE, "stderr": HOSTILE, "truncated": False, "duration_s": 0.1}
    result = ExecResult(environment="prod", channel="ro", tool="panda_curl", rule="read", access="read",
                        targets=[], outcome=outcome)
    with console.capture() as captured:
        show_result(result)
    shown = captured.get()
    assert not any(c in shown for c in ("\x1b", "\x9b", "\u202e", "\u202c")), repr(shown)
    assert "⟨U+001B⟩" in shown and "[bold]x[/bold]" in shown
