"""policy/ must stay pure: stdlib, pydantic and cryptography (signature verification is deterministic)
only, nothing from the project, no clocks or randomness.

Walks every module's syntax tree rather than importing it, so a forbidden import inside a function body
is caught too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

POLICY_DIR = Path(__file__).resolve().parents[2] / "policy"
PROJECT_PACKAGES = {"bamboo", "workflows", "activities", "worker"}
NONDETERMINISTIC_MODULES = {"random", "secrets", "time", "uuid", "os", "socket", "subprocess", "threading", "asyncio"}
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "urandom", "getrandbits"}
MODULES = sorted(POLICY_DIR.glob("*.py"))


def _imported_modules(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("policy" if node.level else (node.module or ""))
    return found


def test_there_are_modules_to_check() -> None:
    assert {path.name for path in MODULES} >= {"code_identity.py", "signature.py", "review.py", "decisions.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_imports_are_stdlib_pydantic_or_policy(path: Path) -> None:
    modules = _imported_modules(ast.parse(path.read_text(encoding="utf-8")))
    tops = {module.split(".")[0] for module in modules}
    assert not tops & PROJECT_PACKAGES, f"{path.name} imports project code: {sorted(tops & PROJECT_PACKAGES)}"
    assert not tops & NONDETERMINISTIC_MODULES, f"{path.name} imports {sorted(tops & NONDETERMINISTIC_MODULES)}"
    allowed = set(sys.stdlib_module_names) | {"pydantic", "policy", "__future__", "cryptography"}
    assert tops <= allowed, f"{path.name} imports {sorted(tops - allowed)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_no_clock_or_entropy_calls(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not calls & CLOCK_CALLS, f"{path.name} calls {sorted(calls & CLOCK_CALLS)}"
