"""The test tiers are derived from what a test uses (tests/conftest.py), so that `make test-fast` really
starts no server: pinned here on stand-in items, and on the stack fixture's guard."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import _CURRENT_TEST, pytest_collection_modifyitems, require_tier, server_tiers, starts_sandboxes


@dataclass
class Item:
    """What the hook reads of a collected test: its fixture closure, parameters and marks."""

    fixturenames: list[str]
    params: dict[str, Any] = field(default_factory=dict)
    marks: list[str] = field(default_factory=list)
    nodeid: str = "tests/x.py::test_x"
    path: str = __file__  # a module that starts no sandbox

    @property
    def callspec(self) -> Any:
        return type("CallSpec", (), {"params": self.params})() if self.params else None

    def iter_markers(self):
        return [getattr(pytest.mark, name).mark for name in self.marks]

    def add_marker(self, name: str) -> None:
        self.marks.append(name)

    def get_closest_marker(self, name: str):
        return next((m for m in self.iter_markers() if m.name == name), None)

    def warn(self, warning: Warning) -> None:
        raise AssertionError(f"unexpected warning: {warning}")


def test_a_test_on_a_fixture_built_on_the_stack_is_in_the_stack_tiers() -> None:
    # `services` asks for `settings`, which asks for `stack`: the closure holds all three.
    item = Item(["services", "settings", "database_url", "stack", "llm_server"])
    pytest_collection_modifyitems(None, [item])  # type: ignore[arg-type]
    assert set(item.marks) == {"services", "temporal", "postgres"}


def test_a_workflow_test_needs_temporal_and_no_postgres() -> None:
    item = Item(["temporal", "temporal_server"])
    assert server_tiers(item) == {"temporal"}  # type: ignore[arg-type]


def test_the_contract_tiers_real_server_is_found_by_its_parameter() -> None:
    real, simulated = Item(["target"], params={"target": "real"}), Item(["target"], params={"target": "simulator"})
    assert server_tiers(real) == {"panda_server"} and server_tiers(simulated) == set()  # type: ignore[arg-type]


def test_a_test_that_starts_no_server_gets_no_mark() -> None:
    item = Item(["tmp_path", "monkeypatch", "simulator"], marks=["slow"])
    pytest_collection_modifyitems(None, [item])  # type: ignore[arg-type]
    assert item.marks == ["slow"]


def test_a_test_reaching_a_server_fixture_at_run_time_is_refused(request: pytest.FixtureRequest) -> None:
    current = request.config.stash[_CURRENT_TEST]
    try:
        request.config.stash[_CURRENT_TEST] = Item(["request"], nodeid="tests/x.py::test_sneaky")  # type: ignore[assignment]
        with pytest.raises(pytest.fail.Exception, match="test_sneaky started the stack"):
            require_tier(request, "postgres", "the stack")
        request.config.stash[_CURRENT_TEST] = Item(["stack"], marks=["postgres"])  # type: ignore[assignment]
        require_tier(request, "postgres", "the stack")
    finally:
        request.config.stash[_CURRENT_TEST] = current


def test_a_module_that_starts_sandbox_runs_is_in_the_sandbox_tier() -> None:
    sandbox_module = str(pathlib.Path(__file__).parents[1] / "sandbox" / "test_runner.py")
    item = Item(["tmp_path"], path=sandbox_module)
    pytest_collection_modifyitems(None, [item])  # type: ignore[arg-type]
    assert item.marks == ["sandbox"] and starts_sandboxes(item)  # type: ignore[arg-type]
    assert not starts_sandboxes(Item(["tmp_path"]))  # type: ignore[arg-type]
