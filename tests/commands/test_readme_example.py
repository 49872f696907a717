"""The README's example tools file loads and allows the request its snippet shows, so the docs stay true."""

from __future__ import annotations

import re
from pathlib import Path

from bamboo.commands.config import load_command_config

from .helpers import allow, deny

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    section = README.read_text().split("## Command tools", 1)[1]
    return re.search(r"```toml\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_loads_and_decides(tmp_path):
    path = tmp_path / "tools.toml"
    path.write_text(_example().replace("/srv/ops-config", str(tmp_path)))
    config = load_command_config(path)
    match = allow(config.policy, "panda_curl",
                  ["curl", "-s", "https://panda.example.org/api/v1/task/get_status?task_id=1"])
    assert match.targets == ["panda:task:1"] and match.credential == "panda_ro"
    assert allow(config.policy, "config_git", ["git", "-C", ".", "log", "-n", "3"]).targets == [f"git:{tmp_path}"]
    deny(config.policy, "panda_curl", ["curl", "-s", "https://evil.example/api/v1/task/get_status"], "not allow-listed")
