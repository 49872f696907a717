"""Workflows stay deterministic by structure: importing every workflow module loads nothing that does I/O.

Run in a fresh interpreter, so what another test imported cannot hide a leak. The baseline is what
temporalio's own workflow API loads (it imports ``socket`` and ``subprocess`` itself); anything a workflow
module adds on top must be a pure module: a contract, a model, the policy, or one of the few pure helpers
listed below with the reason they may be there.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Third-party libraries that talk to the outside world. None of them may arrive with a workflow module.
IO_LIBRARIES = {"httpx", "httpcore", "openai", "psycopg", "psycopg_pool", "pgserver", "mcp", "anyio", "requests",
                "urllib3", "aiohttp", "starlette", "uvicorn", "selenium", "onnxruntime", "tokenizers", "pyseccomp",
                "multiprocessing", "ssl", "sqlite3", "asyncio.subprocess", "concurrent.futures.process"}

# Project modules a workflow may import: contracts and models (pydantic only), the pure policy, and pure helpers.
PURE_PROJECT_PREFIXES = (
    "workflows", "policy", "bamboo.contract", "bamboo.models", "bamboo.audit",
)
PURE_PROJECT_MODULES = {
    "bamboo", "bamboo.accumulation", "bamboo.analysis", "bamboo.investigation", "bamboo.sandbox", "bamboo.tools",
    "bamboo.extraction", "bamboo.executors", "bamboo.batch",
    "bamboo.metrics",              # metric names and a meter wrapper; the meter is the SDK's own
    "bamboo.investigation.code",   # string assembly of the code a run executes (the task preamble)
    "bamboo.analysis.ranked",      # the deterministic ranking the diagnosis is checked against
    "bamboo.extraction.base",      # the strategy's data shapes (pydantic)
    "bamboo.extraction.checks",    # deterministic checks of an extracted graph
    "bamboo.tools.model",          # tool specifications (pydantic) and the caller protocol
}

PROBE = """
import json, sys
import pydantic, temporalio.workflow, temporalio.common, temporalio.exceptions, temporalio.client
base = set(sys.modules)
import pkgutil, importlib, workflows
for info in pkgutil.iter_modules(workflows.__path__):
    importlib.import_module("workflows." + info.name)
print(json.dumps(sorted(set(sys.modules) - base)))
"""


def _added_by_workflows() -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _is_contract(name: str) -> bool:
    return name.startswith("bamboo.") and name.rsplit(".", 1)[-1] in {"contract", "models"}


def test_importing_every_workflow_module_loads_no_io_library():
    added = _added_by_workflows()
    leaked = sorted(m for m in added if m in IO_LIBRARIES or m.split(".")[0] in IO_LIBRARIES)
    assert not leaked, f"workflow modules pull in I/O libraries: {leaked}"


def test_workflow_modules_import_only_pure_project_modules():
    added = _added_by_workflows()
    project = [m for m in added if m.split(".")[0] in {"bamboo", "policy", "workflows", "activities", "worker"}]
    impure = sorted(m for m in project if not (
        m in PURE_PROJECT_MODULES or _is_contract(m)
        or any(m == p or m.startswith(p + ".") for p in PURE_PROJECT_PREFIXES)))
    assert not impure, f"workflow modules import project modules that are not pure: {impure}"


def test_the_probe_sees_a_leak():
    """The probe is not blind: a module that imports httpx shows up in what it reports."""
    probe = PROBE.replace("print(", "import bamboo.llm.client\nprint(")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    added = json.loads(out.stdout)
    assert "httpx" in added and "bamboo.llm.client" in added
