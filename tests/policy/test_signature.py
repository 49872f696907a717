"""Procedure signature: every way of reaching a tool lands in the signature, or the code is opaque.

Aliasing is handled by recording references, not calls: ``m = tools.kill_task; await m()`` puts
``kill_task`` in the signature (not opaque), because the attribute access itself is the reference. Ways of
reaching a tool that a syntax tree cannot follow make the code opaque instead.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.signature import CodeSignature, ScanConventions, procedure_signature, scan_code
from tests.policy.strategies import NOISE_STATEMENTS, REFERENCE_FORMS, tool_names


@pytest.mark.parametrize(
    ("code", "tools"),
    [
        ("await tools.get_task(task_id=1)", ("get_task",)),
        ("x = tools.get_task(1)", ("get_task",)),
        ('await getattr(tools, "get_jobs")()', ("get_jobs",)),
        ('await getattr(tools, "get_jobs", None)()', ("get_jobs",)),
        ("m = tools.kill_task\nawait m()", ("kill_task",)),
        ("from sandbox_tools import get_task\nawait get_task(1)", ("get_task",)),
        ("from sandbox_tools import kill_task as k\nm = k\nawait m()", ("kill_task",)),
        ("import sandbox_tools\nawait sandbox_tools.get_task(1)", ("get_task",)),
        ("import sandbox_tools as bt\nawait bt.tools.kill_task()", ("kill_task",)),
        ("from sandbox_tools import tools as t\nawait t.get_task()", ("get_task",)),
        ("await tools.b()\nawait tools.a()\nawait tools.b()", ("a", "b")),
        ("x = 1\nprint(x)", ()),
        ("import json\nprint(json.dumps({}))", ()),
        ("class Holder:\n    def __init__(self):\n        self.x = __name__", ()),
    ],
)
def test_reference_forms(code: str, tools: tuple[str, ...]) -> None:
    signature = scan_code(code)
    assert (signature.tools, signature.opaque_reasons) == (tools, ())
    assert set(signature.lines) == set(tools)
    assert procedure_signature(code) == tools


@pytest.mark.parametrize(
    ("code", "reason_fragment"),
    [
        ("def broken(:\n    pass", "does not parse"),
        ("x = 1\x00", "does not parse"),
        ("name = 'kill_task'\nawait getattr(tools, name)()", "computed"),
        ("await getattr(tools, *args)()", "computed"),
        ("print(tools)", "as a value"),
        ("t = tools\nawait t.kill_task()", "as a value"),
        ("helper(tools)", "as a value"),
        ('setattr(tools, "x", 1)', "as a value"),
        ("tools = object()", "rebinds"),
        ("def run(tools):\n    pass", "rebinds"),
        ("from somewhere import tools", "rebinds"),
        ("import os as tools", "rebinds"),
        ("for tools in []:\n    pass", "rebinds"),
        ("try:\n    pass\nexcept Exception as tools:\n    pass", "rebinds"),
        ("from sandbox_tools import *", "star import"),
        ("from sandbox_tools import _client", "private"),
        ("tools._client.execute('kill_task')", "non-tool attribute"),
        ("tools.__dict__['kill_task']", "dunder"),
        ("().__class__.__base__.__subclasses__()", "dunder"),
        ("eval('tools.kill_task()')", "eval"),
        ("exec('x = 1')", "exec"),
        ("e = eval", "eval"),
        ("globals()['tools'].kill_task()", "globals"),
        ("__builtins__", "__builtins__"),
        ("import importlib", "importlib"),
        ("import sys\nsys.modules['sandbox_tools'].kill_task()", "sys"),
        ("from inspect import currentframe", "inspect"),
        ("g = (i for i in [])\nf = g.gi_frame.f_globals", "frame attribute"),
        ('getattr(obj, "__class__")', "dunder"),
        ("getattr(obj, attribute_name)", "computed"),
        ("import sandbox_tools.inner", "submodule"),
    ],
)
def test_unanalysable_code_is_opaque(code: str, reason_fragment: str) -> None:
    signature = scan_code(code)
    assert signature.opaque
    assert any(reason_fragment in reason for reason in signature.opaque_reasons), signature.opaque_reasons


def test_conventions_are_parameters() -> None:
    conventions = ScanConventions(tools_object="t", stub_module="generated_stubs")
    code = "from generated_stubs import get_task\nawait t.kill_task()\nawait tools.other()"
    # ``tools`` is an ordinary name under these conventions, so ``tools.other`` is not a tool reference.
    assert scan_code(code, conventions).tools == ("get_task", "kill_task")
    assert scan_code("from sandbox_tools import get_task", conventions).tools == ()


def _program(names: list[str], forms: list[int], noise: list[int]) -> str:
    statements = []
    for index, name in enumerate(names):
        statements.append(REFERENCE_FORMS[forms[index] % len(REFERENCE_FORMS)].format(name=name, index=index))
        statements.append(NOISE_STATEMENTS[noise[index] % len(NOISE_STATEMENTS)])
    return "x = 0\nflag = False\n" + "\n".join(statements)


programs = st.lists(tool_names, min_size=0, max_size=6, unique=True).flatmap(
    lambda names: st.tuples(
        st.just(names),
        st.lists(st.integers(0, 100), min_size=len(names), max_size=len(names)),
        st.lists(st.integers(0, 100), min_size=len(names), max_size=len(names)),
    )
)


@settings(max_examples=60)
@given(programs)
def test_every_reference_form_lands_in_the_signature(program) -> None:
    names, forms, noise = program
    signature = scan_code(_program(names, forms, noise))
    assert not signature.opaque, signature.opaque_reasons
    assert signature.tools == tuple(sorted(names))


@settings(max_examples=60)
@given(programs, st.data())
def test_formatting_does_not_change_the_signature(program, data) -> None:
    names, forms, noise = program
    code = _program(names, forms, noise)
    padded = "\n\n".join(line + data.draw(st.sampled_from(["", " ", "\t"])) for line in code.split("\n"))
    # Blank lines move line numbers, nothing else.
    padded_signature, signature = scan_code(padded), scan_code(code)
    assert (padded_signature.tools, padded_signature.opaque_reasons) == (signature.tools, signature.opaque_reasons)


DYNAMIC_REACHES = (
    "await getattr(tools, chosen)()",
    "handle = tools\nawait handle.{name}()",
    "eval('tools.{name}()')",
    "await globals()['tools'].{name}()",
    "from sandbox_tools import *",
    "await tools.__getattribute__('{name}')()",
)


@settings(max_examples=60)
@given(programs, st.sampled_from(DYNAMIC_REACHES), st.data())
def test_a_dynamic_reach_anywhere_makes_the_code_opaque(program, dynamic, data) -> None:
    names, forms, noise = program
    lines = _program(names, forms, noise).split("\n")
    position = data.draw(st.integers(0, len(lines)))
    injected = dynamic.format(name=data.draw(tool_names))
    code = "\n".join([*lines[:position], injected, *lines[position:]])
    # Injecting at column 0 after an indented block header would be a syntax error; that is opaque too.
    assert scan_code(code).opaque


@given(st.text(max_size=200))
def test_the_scan_is_total(text: str) -> None:
    signature = scan_code(text)
    assert signature.tools == tuple(sorted(set(signature.tools)))
