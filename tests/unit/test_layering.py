"""Which package may import which: adapters raise their own errors and know nothing of Temporal, the store
knows nothing of the tools that read it or of the process manager that starts it, only ``worker/`` builds
services, imports point only down the layers, and ``bamboo/``'s packages form no import cycle
(docs/architecture.md)."""

from __future__ import annotations

import ast
import pathlib
import re
from collections.abc import Iterable

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


# ---------------------------------------------------------------- layers and package-level cycles, read with ast
# The layers, lowest first: `policy/` (pure, imports nothing of the project), `bamboo/` (contracts, models,
# adapters, services, front ends), then `workflows/` and `activities/`, then `worker/` (the composition root).
# An import may only point down. Inside `bamboo/`, each subpackage and each top-level module (`bamboo/audit.py`)
# is one node, and the nodes must form no cycle: a cycle means no package can be understood, tested or moved
# without the others (six of them once were, from two models living in the populate contract).

PROJECT = ("bamboo", "policy", "workflows", "activities", "worker")
ABOVE = {"policy": ("bamboo", "workflows", "activities", "worker"), "bamboo": ("workflows", "activities", "worker")}

# Cycles known today, each with where it comes from. A new cycle fails; so does a known one that grew or went away
# (then delete its entry here), so this list can only shrink.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _module_name(path: pathlib.Path, root: pathlib.Path) -> tuple[str, str]:
    """The module's dotted name and the package its relative imports start from."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def imported_modules(path: pathlib.Path, root: pathlib.Path = ROOT) -> set[str]:
    """Every module a file imports, anywhere in it (a lazy import inside a function counts), relative imports
    resolved; ``from a import b`` yields both ``a`` and ``a.b``, since ``b`` may be a module."""
    _, package = _module_name(path, root)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _bamboo_node(module: str, root: pathlib.Path) -> str | None:
    """The node of the package graph a module belongs to: ``bamboo.store.knowledge`` → ``store``,
    ``bamboo.audit`` → ``audit``; None outside ``bamboo`` (and for ``bamboo`` itself)."""
    parts = module.split(".")
    if parts[0] != "bamboo" or len(parts) < 2:
        return None
    if (root / "bamboo" / parts[1]).is_dir() or (root / "bamboo" / f"{parts[1]}.py").is_file():
        return parts[1]
    return None


def package_edges(root: pathlib.Path = ROOT) -> dict[tuple[str, str], set[str]]:
    """(importer node, imported node) → the importing modules, over ``bamboo/``."""
    edges: dict[tuple[str, str], set[str]] = {}
    for path in sorted((root / "bamboo").rglob("*.py")):
        name, _ = _module_name(path, root)
        source = _bamboo_node(name, root)
        if source is None:
            continue
        for module in imported_modules(path, root):
            target = _bamboo_node(module, root)
            if target is not None and target != source:
                edges.setdefault((source, target), set()).add(name)
    return edges


def cycles(edges: Iterable[tuple[str, str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def upward_imports(root: pathlib.Path = ROOT) -> list[str]:
    """Imports that point from a lower layer up: `policy/` into the project, `bamboo/` into the layers above it."""
    bad = []
    for layer, above in ABOVE.items():
        for path in sorted((root / layer).rglob("*.py")):
            for module in sorted(imported_modules(path, root)):
                if module.split(".")[0] in above:
                    bad.append(f"{path.relative_to(root)} imports {module}")
    return bad


def test_no_import_points_from_a_lower_layer_up():
    assert not upward_imports(), "\n".join(upward_imports())


def test_no_package_level_cycle_inside_bamboo():
    edges = package_edges()
    found = set(cycles(edges))
    new = found - set(KNOWN_CYCLES)
    gone = set(KNOWN_CYCLES) - found

    def explain(cycle: frozenset[str]) -> str:
        inside = sorted((a, b) for a, b in edges if a in cycle and b in cycle)
        return "\n".join(f"  {a} -> {b}: {', '.join(sorted(edges[a, b]))}" for a, b in inside)

    assert not new, "package-level import cycles in bamboo/ (move the shared piece down, e.g. to bamboo/models/):\n" + \
        "\n".join(f"{sorted(c)}\n{explain(c)}" for c in new)
    assert not gone, f"these cycles are gone or changed: delete or update their KNOWN_CYCLES entry: {[sorted(c) for c in gone]}"


def test_the_checks_see_a_cycle_and_an_upward_import(tmp_path: pathlib.Path):
    """The checks are not blind: a two-package cycle through a relative and a lazy import, and a policy module
    importing the project, are both reported."""
    (tmp_path / "bamboo" / "alpha").mkdir(parents=True)
    (tmp_path / "bamboo" / "beta").mkdir()
    (tmp_path / "policy").mkdir()
    (tmp_path / "bamboo" / "__init__.py").write_text("")
    (tmp_path / "bamboo" / "alpha" / "__init__.py").write_text("")
    (tmp_path / "bamboo" / "beta" / "__init__.py").write_text("")
    (tmp_path / "bamboo" / "gamma.py").write_text("from bamboo import alpha\n")
    (tmp_path / "bamboo" / "alpha" / "a.py").write_text("from ..beta import b\n")
    (tmp_path / "bamboo" / "beta" / "b.py").write_text("def later():\n    from bamboo.alpha.a import x\n")
    (tmp_path / "policy" / "p.py").write_text("from worker import services\n")
    edges = package_edges(tmp_path)
    assert set(edges) == {("alpha", "beta"), ("beta", "alpha"), ("gamma", "alpha")}
    assert cycles(edges) == [frozenset({"alpha", "beta"})]
    assert upward_imports(tmp_path) == ["policy/p.py imports worker", "policy/p.py imports worker.services"]
