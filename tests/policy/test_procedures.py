"""Procedure naming and read-only-ness recomputed from code (never from a stored flag)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policy.procedures import (
    MAX_PROCEDURE_NAME_LENGTH,
    assess_read_only,
    is_exposable_procedure,
    is_procedure_name,
    procedure_name,
    reached_procedures,
)

FLAGS = {"get_task": True, "get_jobs": True, "kill_task": False, "retry_task": False}


def test_name_is_sorted_tool_names() -> None:
    assert procedure_name(["get_task", "get_jobs", "get_task"]) == "proc__get_jobs__get_task"
    assert is_procedure_name("proc__get_jobs__get_task")
    assert not is_procedure_name("get_task")


def test_long_names_are_cut_and_hash_suffixed() -> None:
    tools = [f"fetch_something_long_{index}" for index in range(5)]
    name = procedure_name(tools)
    assert len(name) == MAX_PROCEDURE_NAME_LENGTH
    assert re.fullmatch(r"proc__[A-Za-z0-9_]+__[0-9a-f]{8}", name)
    assert procedure_name(reversed(tools)) == name


def test_sanitised_names_cannot_collide() -> None:
    assert procedure_name(["a-b"]) != procedure_name(["a_b"])
    assert re.fullmatch(r"[A-Za-z0-9_]+", procedure_name(["server.get-task"]))


def test_no_tools_has_no_procedure_name() -> None:
    with pytest.raises(ValueError, match="calls none"):
        procedure_name([])


tool_sets = st.sets(st.text(alphabet="abcdefghij_-.", min_size=1, max_size=25), min_size=1, max_size=8)


@given(tool_sets, st.randoms())
def test_names_are_order_insensitive_bounded_and_safe(tools, random) -> None:
    shuffled = list(tools)
    random.shuffle(shuffled)
    name = procedure_name(shuffled)
    assert name == procedure_name(sorted(tools))
    assert len(name) <= MAX_PROCEDURE_NAME_LENGTH
    assert name.startswith("proc__") and re.fullmatch(r"[A-Za-z0-9_]+", name)


@given(tool_sets, tool_sets)
def test_different_tool_sets_get_different_names(first, second) -> None:
    if first != second:
        assert procedure_name(first) != procedure_name(second)


def test_read_only_code() -> None:
    verdict = assess_read_only("await tools.get_task(1)\nawait tools.get_jobs(1)", FLAGS, {})
    assert verdict.read_only
    assert verdict.raw_tools == ("get_jobs", "get_task")
    assert verdict.state_changing == ()


def test_aliased_state_changing_call_is_not_read_only() -> None:
    verdict = assess_read_only("m = tools.kill_task\nawait m()", FLAGS, {})
    assert not verdict.read_only
    assert verdict.state_changing == ("kill_task",)


def test_unknown_tools_are_not_read_only() -> None:
    assert not assess_read_only("await tools.never_declared()", FLAGS, {}).read_only


def test_opaque_code_is_not_read_only_even_without_tools() -> None:
    verdict = assess_read_only("await getattr(tools, name)()", FLAGS, {})
    assert not verdict.read_only and verdict.opaque


def test_procedures_are_judged_by_their_current_code_not_a_flag() -> None:
    flags = {**FLAGS, "proc__get_jobs__get_task": True}  # a stale stored flag that must be ignored
    procedures = {"proc__get_jobs__get_task": "await tools.get_task(1)\nawait tools.kill_task(1)"}
    verdict = assess_read_only("await tools.proc__get_jobs__get_task()", flags, procedures)
    assert not verdict.read_only
    assert verdict.procedures == ("proc__get_jobs__get_task",)
    assert verdict.state_changing == ("kill_task",)


def test_nested_procedures_resolve_recursively() -> None:
    procedures = {
        "proc__outer": "await tools.proc__inner()\nawait tools.get_task()",
        "proc__inner": "await tools.get_jobs()",
    }
    verdict = assess_read_only("await tools.proc__outer()", FLAGS, procedures)
    assert verdict.read_only
    assert verdict.procedures == ("proc__inner", "proc__outer")
    changed = {**procedures, "proc__inner": "from sandbox_tools import retry_task\nawait retry_task()"}
    assert assess_read_only("await tools.proc__outer()", FLAGS, changed).state_changing == ("retry_task",)
    assert reached_procedures("await tools.proc__outer()", procedures) == ("proc__inner", "proc__outer")


def test_procedure_without_stored_code_is_not_read_only() -> None:
    verdict = assess_read_only("await tools.proc__gone()", {**FLAGS, "proc__gone": True}, {})
    assert not verdict.read_only
    assert verdict.missing_procedures == ("proc__gone",)
    assert verdict.all_procedures == ("proc__gone",)


def test_opaque_nested_procedure_taints_the_caller() -> None:
    procedures = {"proc__x": "await getattr(tools, n)()"}
    verdict = assess_read_only("await tools.proc__x()", FLAGS, procedures)
    assert not verdict.read_only
    assert any(reason.startswith("in proc__x: ") for reason in verdict.opaque_reasons)


def test_procedure_cycles_are_not_read_only() -> None:
    procedures = {"proc__a": "await tools.proc__b()", "proc__b": "await tools.get_task()\nawait tools.proc__a()"}
    verdict = assess_read_only("await tools.proc__a()", FLAGS, procedures)
    assert not verdict.read_only
    assert any("cycle" in reason for reason in verdict.opaque_reasons)


@pytest.mark.parametrize(
    ("code", "allow_mutating", "exposed"),
    [
        ("await tools.get_task()\nawait tools.get_jobs()", False, True),
        ("await tools.get_task()", False, False),  # single tool: the raw tool already covers it
        ("await tools.get_task()\nawait tools.kill_task()", False, False),
        ("await tools.get_task()\nawait tools.kill_task()", True, True),
        ("await tools.get_task()\nawait getattr(tools, n)()", True, False),
    ],
)
def test_exposable_procedures(code: str, allow_mutating: bool, exposed: bool) -> None:
    assert is_exposable_procedure("proc__p", FLAGS, {"proc__p": code}, allow_mutating) is exposed


def test_procedure_without_code_is_not_exposable() -> None:
    assert not is_exposable_procedure("proc__p", FLAGS, {})
