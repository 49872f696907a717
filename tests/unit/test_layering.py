"""Which package may import which: adapters raise their own errors and know nothing of Temporal, the store
knows nothing of the tools that read it or of the process manager that starts it, and only ``worker/``
builds services (docs/architecture.md)."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# package -> modules it must not import (checked on the source text, so a lazy import counts too)
FORBIDDEN = {
    "bamboo/store": ("bamboo.mcp", "bamboo.devstack", "bamboo.cli", "bamboo.frontends", "temporalio"),
    "bamboo/llm": ("temporalio", "bamboo.store", "bamboo.cli"),
    "bamboo/panda": ("temporalio", "bamboo.mcp", "bamboo.store"),
    "bamboo/sandbox": ("bamboo.store", "bamboo.mcp", "bamboo.cli"),
    "bamboo/tools": ("temporalio", "bamboo.mcp", "bamboo.cli"),
    "bamboo/embeddings": ("temporalio", "bamboo.store"),
    "activities": ("worker", "bamboo.services.build", "bamboo.store.db"),
}


def _imports(path: pathlib.Path) -> list[str]:
    return re.findall(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", path.read_text(), re.M)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_keeps_its_dependencies(package: str):
    bad = []
    for f in sorted((ROOT / package).rglob("*.py")):
        if f.name == "contract.py":  # contracts declare activities with temporalio's decorators, by design
            continue
        for a, b in _imports(f):
            name = a or b
            if any(name == m or name.startswith(m + ".") for m in FORBIDDEN[package]):
                bad.append(f"{f.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_only_the_worker_builds_services():
    builders = ("build_services", "open_configured_store(", "investigation_activities(")
    offenders = []
    for top in ("activities", "workflows", "bamboo/analysis", "bamboo/investigation", "bamboo/accumulation"):
        for f in (ROOT / top).rglob("*.py"):
            text = f.read_text()
            offenders += [f"{f.relative_to(ROOT)}: {b}" for b in builders if b in text]
    assert not offenders, offenders
