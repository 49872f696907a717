"""Allow-sets per phase: automatic = exactly the read-only tools; interactive = all but human-input ones."""

from __future__ import annotations

from types import SimpleNamespace

from policy.catalog import ToolCatalog, ToolFacts
from policy.phases import (
    Phase,
    allow_set_for_phase,
    automatic_allow_set,
    granted_allow_set,
    interactive_allow_set,
    replay_allow_set,
)

CATALOG = ToolCatalog.build(
    [
        ToolFacts(name="get_task", read_only=True),
        ToolFacts(name="get_jobs", read_only=True, origin="external"),
        ToolFacts(name="kill_task", read_only=False),
        ToolFacts(name="ask_operator", read_only=True, requires_interaction=True),
        ToolFacts(name="proc__get_jobs__get_task", read_only=False, origin="procedure"),
        ToolFacts(name="proc__get_task__kill_task", read_only=True, origin="procedure"),
        ToolFacts(name="proc__missing", read_only=True, origin="procedure"),
    ],
    {
        "proc__get_jobs__get_task": "await tools.get_task()\nawait tools.get_jobs()",
        "proc__get_task__kill_task": "await tools.get_task()\nm = tools.kill_task\nawait m()",
    },
)


def test_automatic_is_exactly_the_read_only_tools() -> None:
    # Procedure flags are ignored both ways: judged by their code.
    assert automatic_allow_set(CATALOG) == {"get_task", "get_jobs", "proc__get_jobs__get_task"}
    assert allow_set_for_phase(Phase.AUTOMATIC, CATALOG) == automatic_allow_set(CATALOG)


def test_interactive_excludes_only_human_input_tools() -> None:
    expected = {tool.name for tool in CATALOG.tools} - {"ask_operator"}
    assert interactive_allow_set(CATALOG) == expected
    assert allow_set_for_phase(Phase.INTERACTIVE, CATALOG) == expected


def test_granted_allow_set_is_the_granted_procedures() -> None:
    assert granted_allow_set(["proc__a", "proc__b"]) == {"proc__a", "proc__b"}


def test_replay_is_limited_to_what_the_stored_code_reaches_within_the_phase() -> None:
    assert replay_allow_set("proc__get_task__kill_task", Phase.INTERACTIVE, CATALOG) == {"get_task", "kill_task"}
    assert replay_allow_set("proc__get_task__kill_task", Phase.AUTOMATIC, CATALOG) == {"get_task"}
    assert replay_allow_set("proc__missing", Phase.INTERACTIVE, CATALOG) == frozenset()


def test_replay_of_opaque_code_gets_nothing() -> None:
    catalog = ToolCatalog.build(CATALOG.tools, {"proc__x": "await getattr(tools, n)()"})
    assert replay_allow_set("proc__x", Phase.INTERACTIVE, catalog) == frozenset()


def test_tool_facts_from_any_spec_shape() -> None:
    origin = SimpleNamespace(value="external")
    spec = SimpleNamespace(name="get_logs", read_only=True, requires_interaction=False, origin=origin)
    assert ToolFacts.from_spec(spec) == ToolFacts(name="get_logs", read_only=True, origin="external")
    assert ToolFacts.from_spec(SimpleNamespace(name="bare")) == ToolFacts(name="bare")


def test_tool_facts_from_the_shared_tool_spec() -> None:
    from bamboo.tools.model import ToolOrigin, ToolSpec

    spec = ToolSpec(name="kill_task", external_access=True, origin=ToolOrigin.COMMAND)
    assert ToolFacts.from_spec(spec) == ToolFacts(name="kill_task", read_only=False, origin="command")
    assert {origin.value for origin in ToolOrigin} == {"builtin", "external", "procedure", "command"}


def test_catalog_round_trips_through_json() -> None:
    assert ToolCatalog.model_validate_json(CATALOG.model_dump_json()) == CATALOG
