"""`bamboo tools list` reads at 80 columns: no line wider than the terminal, and the description keeps enough
width to read (it used to be folded into a six-character strip, 212 lines for eleven tools)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.services import ROOT


def test_tools_list_fits_80_columns_and_keeps_the_description_readable() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAMBOO_")} | {"COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-m", "bamboo.cli.main", "tools", "list"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if line.startswith("│ ") and line.split("│")[1].strip()]  # a tool's first line
    assert len(rows) >= 5
    assert len(lines) <= 8 + 5 * len(rows), done.stdout  # header, caption and at most five lines a tool
    [header] = [line for line in lines if "description" in line]
    assert len(header.split("┃")[4]) >= 24, done.stdout  # the description column's width
