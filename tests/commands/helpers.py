"""Small helpers shared by the command tool tests."""

from __future__ import annotations

import pytest

from policy.commands import CommandDenied, CommandMatch, CommandPolicy, evaluate


def allow(policy: CommandPolicy, tool: str, argv: list[str], *, environment: str = "staging",
          channel: str = "ro", **kw) -> CommandMatch:
    return evaluate(policy, tool, argv, environment=environment, channel=channel, **kw)


def deny(policy: CommandPolicy, tool: str, argv: list[str], because: str, *, environment: str = "staging",
         channel: str = "ro", **kw) -> str:
    """Assert the request is refused with a one-line reason containing ``because``; return the reason."""
    with pytest.raises(CommandDenied) as caught:
        evaluate(policy, tool, argv, environment=environment, channel=channel, **kw)
    reason = caught.value.reason
    assert "\n" not in reason, reason
    assert because in reason, reason
    return reason
