"""Generated stub module: typed, documented, exactly the bridged tools, and injection-proof."""

from __future__ import annotations

import ast
import inspect
import types

import pytest

from bamboo.sandbox.stubs import generate_stub_module
from bamboo.sandbox.stubs import python_name, render_docstring
from bamboo.tools.model import ToolSpec

GET_TASK = ToolSpec(
    name="get_task",
    description="Fetch a PanDA task.",
    input_schema={
        "type": "object",
        "properties": {
            "task_id": {"type": "integer", "description": "JEDI task id"},
            "fields": {"type": "array", "description": "which fields"},
            "verbose": {"type": ["boolean", "null"], "default": False},
            "mode": {"type": "string", "enum": ["brief", "full"]},
        },
        "required": ["task_id"],
    },
    read_only=True,
)


def load(specs, calls):
    source, names = generate_stub_module(specs)
    module = types.ModuleType("sandbox_tools")

    async def bridge_call(name, args):
        calls.append((name, args))
        return {"called": name}

    module.__dict__["_bridge_call"] = bridge_call
    exec(compile(source, "<stub>", "exec", dont_inherit=True), module.__dict__)
    return module, names, source


async def test_one_typed_function_per_tool_with_schema_docstring():
    calls: list = []
    module, names, _ = load([GET_TASK], calls)
    fn = module.get_task
    assert inspect.iscoroutinefunction(fn)
    sig = inspect.signature(fn)
    assert list(sig.parameters) == ["task_id", "fields", "verbose", "mode"]
    assert sig.parameters["task_id"].annotation is int
    assert sig.parameters["task_id"].default is inspect.Parameter.empty
    assert "JEDI task id" in fn.__doc__ and "task_id (int, required)" in fn.__doc__
    assert "one of brief, full" in fn.__doc__ and "Read-only." in fn.__doc__
    assert await fn(7, mode="full") == {"called": "get_task"}
    assert calls == [("get_task", {"task_id": 7, "mode": "full"})]  # unset optionals are not sent
    assert names == {"get_task": "get_task"}


async def test_what_is_importable_is_exactly_what_is_bridged():
    module, _, _ = load([GET_TASK, ToolSpec(name="get_log")], [])
    assert sorted(module.__all__) == ["get_log", "get_task"]
    assert sorted(n for n in dir(module) if not n.startswith("_")) == ["get_log", "get_task"]
    assert sorted(n for n in vars(module) if not n.startswith("_")) == ["get_log", "get_task"]
    with pytest.raises(AttributeError, match="not available in this run; available tools: get_log, get_task"):
        module.kill_task  # noqa: B018


def test_empty_bridge_generates_an_empty_module():
    module, names, _ = load([], [])
    assert module.__all__ == [] and names == {}
    with pytest.raises(AttributeError, match="available tools: none"):
        module.get_task  # noqa: B018


async def test_odd_names_and_properties_fall_back_to_kwargs():
    spec = ToolSpec(
        name="panda.get-task", input_schema={"type": "object", "properties": {"task-id": {"type": "integer"}}}
    )
    calls: list = []
    module, names, _ = load([spec], calls)
    assert names == {"panda_get_task": "panda.get-task"}
    await module.panda_get_task(**{"task-id": 3})
    assert calls == [("panda.get-task", {"task-id": 3})]


@pytest.mark.parametrize("name,expected", [("class", "class_"), ("9lives", "tool_9lives"), ("__x", "x"), ("tools", "tools_")])
def test_python_name(name, expected):
    assert python_name(name) == expected


def test_colliding_names_stay_distinct():
    _, names, _ = load([ToolSpec(name="a-b"), ToolSpec(name="a_b")], [])
    assert sorted(names.values()) == ["a-b", "a_b"] and len(names) == 2


def test_hostile_schema_text_cannot_inject_code():
    evil = ToolSpec(
        name="x",
        description='"""\nimport os; os.system("id")\n"""',
        input_schema={"type": "object", "properties": {"a": {"type": "string", "description": "'''); raise SystemExit('"}}},
    )
    calls: list = []
    module, _, source = load([evil], calls)
    tree = ast.parse(source)
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [i.module for i in imports if isinstance(i, ast.ImportFrom)] == ["typing"]
    assert not any(isinstance(n, ast.Import) for n in imports)
    assert "os.system" in module.x.__doc__  # the text is inert documentation


def test_docstring_mentions_state_changes():
    assert "Changes state." in render_docstring(ToolSpec(name="kill_task", read_only=False))


async def test_a_tool_name_ending_in_a_newline_is_not_used_as_a_python_name():
    """"$" matches before a final newline, so "status_of\n" passed as a plain name and its stub did not compile:
    every run that bridged it crashed."""
    spec = ToolSpec(name="status_of\n", input_schema={"type": "object", "properties": {"a\n": {"type": "integer"}}})
    calls: list = []
    module, names, _ = load([spec], calls)
    [python] = names
    assert "\n" not in python and names[python] == "status_of\n"
    await getattr(module, python)(**{"a\n": 1})
    assert calls == [("status_of\n", {"a\n": 1})]
