"""Which code a running worker was started with, so `bamboo dev up` can tell a stale one.

A worker keeps the modules it imported at start-up, while each new workflow run reads the workflow modules
afresh (Temporal's sandbox); after the code changed, a worker left running from an earlier `make demo` ran new
workflow code against its old contract modules and failed every session's task. The fingerprint is of the
project's Python sources (path, size and modification time of each), cheap enough to take on every `up`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGES = ("bamboo", "workflows", "activities", "worker", "policy")
ROOT = Path(__file__).resolve().parents[2]


def source_fingerprint(root: Path = ROOT) -> str:
    """A digest that changes when any of the project's Python sources is added, removed or modified."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            stat = path.stat()
            digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()
