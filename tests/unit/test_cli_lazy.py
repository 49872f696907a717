"""The CLI loads a command's module when the command runs: `bamboo approve` does not import the console, the
populate view, the store or the tool layer (about 3 s of CPU for the whole tree on this machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict

import pytest

from bamboo.cli.main import COMMAND_MODULES, commands_of

_LOADED_BY = """
import sys
from typer.testing import CliRunner
from bamboo.cli.main import app
result = CliRunner().invoke(app, {args!r})
assert result.exit_code == 0, result.output
print(" ".join(sorted(m for m in sys.modules if m.startswith(("bamboo", "worker")))))
"""


def _modules_loaded_by(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", _LOADED_BY.format(args=list(args))], capture_output=True, text=True,
                         check=True, timeout=120)
    return set(out.stdout.split())


def test_each_module_registers_exactly_the_commands_the_root_names_for_it() -> None:
    named: dict[str, set[str]] = defaultdict(set)
    for command, module in COMMAND_MODULES.items():
        named[module].add(command)
    for module, commands in named.items():
        group = commands_of(module)
        assert group is not None, f"{module} did not import"
        assert set(group.commands) == commands, module


@pytest.mark.parametrize("command", ["approvals", "approve", "analyze"])
def test_a_command_loads_its_own_module_and_not_the_others(command: str) -> None:
    loaded = _modules_loaded_by(command, "--help")
    assert COMMAND_MODULES[command] in loaded
    for other in ("bamboo.cli.console_cmd", "bamboo.cli.populate_cmd", "bamboo.cli.tools_cmd",
                  "bamboo.cli.mattermost_cmd", "bamboo.frontends.console.app", "worker.services"):
        assert other not in loaded, f"`bamboo {command}` imported {other}"


def test_help_still_lists_every_command() -> None:
    out = subprocess.run([sys.executable, "-m", "bamboo.cli.main", "--help"], capture_output=True, text=True,
                         check=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    for command in COMMAND_MODULES:
        assert f" {command} " in out.stdout, command
