"""Hypothesis strategies shared by the policy property tests."""

from __future__ import annotations

import keyword

from hypothesis import strategies as st

# Line content: no line breaks, no control characters, no surrounding whitespace, never empty.
# A line of a program: never one holding only a continuation backslash, which is no line of its own to Python
# (the normal form joins it with the next, test_runs_of_continuation_backslashes_keep_the_blocks_python_reads), so
# its indentation and its presence are not the program's to the properties that draw these.
line_content = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=30
).filter(lambda text: text == text.strip() and bool(text) and text != "\\")

indentation = st.text(alphabet=" \t", max_size=8)

source_lines = st.lists(st.tuples(indentation, line_content), min_size=1, max_size=12)

trailing_whitespace = st.text(alphabet=" \t\f\v\u00a0\u3000", max_size=4)

_RESERVED = {
    "tools", "sandbox_tools", "getattr", "setattr", "hasattr", "delattr", "print", "eval", "exec", "compile",
    "globals", "locals", "vars", "breakpoint", "range", "len", "alias", "result", "sys", "inspect", "gc",
    "ctypes", "builtins", "importlib",
    # names the scan treats as routes to the interpreter's internals (opaque by design, never a tool name)
    "modules", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "gi_frame", "gi_code", "cr_frame",
    "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next",
}

tool_names = st.from_regex(r"[a-z][a-z0-9]{0,8}(_[a-z0-9]{1,6}){0,2}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and name not in _RESERVED and not name.startswith("alias_")
)

# How a program may reach one tool; every form must land in the signature without making it opaque.
REFERENCE_FORMS = (
    "await tools.{name}(task_id=1)",
    "result = tools.{name}()",
    'await getattr(tools, "{name}")()',
    "alias_{index} = tools.{name}\nawait alias_{index}()",
    "from sandbox_tools import {name}\nawait {name}()",
    "from sandbox_tools import {name} as alias_{index}\nawait alias_{index}()",
    "import sandbox_tools\nawait sandbox_tools.{name}()",
    "import sandbox_tools as alias_{index}\nawait alias_{index}.tools.{name}()",
    "if flag:\n    await tools.{name}()",
    "async def helper_{index}():\n    return await tools.{name}()",
    "for item in range(3):\n    values = [await tools.{name}(item)]",
)

NOISE_STATEMENTS = ("x = 1", "print(x)", "summary = {'a': [1, 2]}", "flag = True", "# a comment", "")
