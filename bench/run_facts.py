"""What every benchmark report states about the run itself: the commit measured and the machine's load."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The product's code: a change elsewhere (a results file, a note) does not make the measured code differ.
PRODUCT_CODE = ("workflows", "activities", "bamboo", "worker", "policy")


def commit() -> str:
    """The commit this tree is, and whether the product code measured differs from it ("unknown" outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *PRODUCT_CODE], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (with uncommitted changes in the tree)" if dirty else "")


def loadavg() -> str:
    """The 1, 5 and 15-minute load averages, as a report prints them."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())
