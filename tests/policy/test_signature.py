"""Procedure signature: every way of reaching a tool lands in the signature, or the code is opaque.

Aliasing is handled by recording references, not calls: ``m = tools.kill_task; await m()`` puts
``kill_task`` in the signature (not opaque), because the attribute access itself is the reference. Ways of
reaching a tool that a syntax tree cannot follow make the code opaque instead.
"""

from __future__ import annotations

import ast
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy import scan_names
from policy.scan_names import NAME_FIELDS
from policy.signature import ScanConventions, procedure_signature, scan_code
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
        ('await getattr(tools, "x)** @channel\\n\\n**read-only**")()', "not a plain identifier"),
        ('hasattr(tools, "kill_task\\u202e")', "not a plain identifier"),
        ('await getattr(tools, "get_t\u0430sk")()', "not a plain identifier"),
        ("dry_run = False\ndef safe():\n    global dry_run\n    dry_run = True\nsafe()", "declares global"),
        ('dry_run = True\nif "dry_run" not in dir():\n    await tools.kill_task(task_id=7)', "dir() without"),
        ("listing = dir\nprint(listing())", "dir() without"),
        ("import traceback\nframes = traceback.StackSummary.extract(traceback.walk_stack(None), capture_locals=True)",
         "traceback"),
        ("import contextlib\nwith contextlib.suppress(Exception):\n    exit()\nawait tools.kill_task(task_id=7)",
         "uses exit"),
        ("def outer():\n    x = 1\n    def inner():\n        nonlocal x\n    return inner", "declares nonlocal"),
    ],
)
def test_unanalysable_code_is_opaque(code: str, reason_fragment: str) -> None:
    signature = scan_code(code)
    assert signature.opaque
    assert any(reason_fragment in reason for reason in signature.opaque_reasons), signature.opaque_reasons


# ``match`` reads attributes by the names in its class patterns and keys by its mapping patterns: each is the
# same walk as the attribute access it stands for, so it is as opaque.
MATCH_GADGETS = [
    (("def probe():\n    pass\nmatch probe:\n    case object(__globals__=namespace):\n"
      "        await namespace['tools'].kill_task(task_id=1)"), "dunder name __globals__"),
    ("match probe:\n    case object(__globals__={'tools': t}):\n        await t.kill_task()", "__globals__"),
    ("g = (i for i in [0])\nmatch g:\n    case object(gi_frame=object(f_globals=names)):\n        pass", "gi_frame"),
    ("match frame:\n    case object(f_back=older):\n        pass", "frame attribute f_back"),
    ("match frame:\n    case object(f_globals=names):\n        pass", "frame attribute f_globals"),
    (("try:\n    1 / 0\nexcept Exception as error:\n    match error:\n"
      "        case object(__traceback__=object(tb_frame=frame)):\n            pass"), "tb_frame"),
    ("match anything:\n    case object(__builtins__=b):\n        pass", "__builtins__"),
    ("import os\nmatch os:\n    case object(sys=object(modules=table)):\n        pass", "module table"),
    ("match namespace:\n    case {'__builtins__': b}:\n        pass", "mapping key"),
    ("match namespace:\n    case {'tools': t}:\n        await t.kill_task()", "mapping key 'tools'"),
    ("match namespace:\n    case {Keys.TOOLS: t}:\n        pass", "mapping key computed"),
    ("match frame:\n    case Frame(names):\n        pass", "__match_args__"),
    ("match x:\n    case [*tools]:\n        pass", "rebinds tools"),
    ("match x:\n    case {**tools}:\n        pass", "rebinds tools"),
    ("match x:\n    case int() as tools:\n        pass", "rebinds tools"),
    ("match x:\n    case _ as __builtins__:\n        pass", "__builtins__"),
]

# Every other place the syntax tree carries a name that reads or binds something.
OTHER_NAMES = [
    ("def f():\n    global __builtins__", "__builtins__"),
    ("def f():\n    nonlocal tools", "rebinds tools"),
    ("from os import sys", "module table"),
    ("from functools import __dict__", "dunder name __dict__"),
    ("import __main__", "dunder name __main__"),
    ("del holder.__globals__", "dunder name __globals__"),
    ("del tools.get_task", "rebinds or deletes tools.get_task"),
    ("tools.get_task = tools.kill_task", "rebinds or deletes tools.get_task"),
    ("from operator import attrgetter\nattrgetter('__globals__')(probe)", "__globals__"),
    ("import operator\noperator.attrgetter('x', 'y.f_back')(frame)", "f_back"),
    ("import operator\noperator.attrgetter(name)(probe)", "attrgetter with a computed"),
    ("import operator\noperator.methodcaller(name)(probe)", "methodcaller with a computed"),
    ("look = getattr\nlook(probe, '__glob' + 'als__')", "getattr as a value"),
    ("import os\ngetattr(getattr(os, 'sys'), 'modules')", "module table"),
    ("'{0.__globals__[tools]}'.format(probe)", "__globals__ in a string"),
    ("helper(f_back=1)", "frame attribute f_back"),
    ("class C(__globals__=1):\n    pass", "dunder name __globals__"),
    ("def f(eval):\n    pass", "eval"),
    ("lambda tools: 1", "rebinds tools"),
]


@pytest.mark.parametrize(("code", "reason_fragment"), MATCH_GADGETS + OTHER_NAMES)
def test_names_in_every_syntax_position_are_judged(code: str, reason_fragment: str) -> None:
    signature = scan_code(code)
    assert signature.opaque, code
    assert any(reason_fragment in reason for reason in signature.opaque_reasons), signature.opaque_reasons


@pytest.mark.parametrize(
    "code",
    [
        ("match task:\n    case {'status': 'broken', **rest}:\n        print(rest)\n    case [first, *others]:\n"
         "        print(first)\n    case str(text) | int(text):\n        print(text)\n    case _:\n        pass"),
        ("match task:\n    case dict(status=s) if s:\n        print(s)\n    case {'jobs': [*jobs]} as whole:\n"
         "        print(jobs, whole)"),
        "from __future__ import annotations\nfrom collections import defaultdict\nx = defaultdict(list)",
        "if __name__ == '__main__':\n    print('main')",
        "import operator\nby_status = operator.attrgetter('status', 'site.name')\nprint(by_status)",
        "try:\n    pass\nexcept ValueError as error:\n    print(error)",
        "def f(task_id, *, limit=3):\n    return [task_id, limit]\nprint(f(1, limit=2))",
    ],
)
def test_ordinary_code_in_the_same_positions_stays_analysable(code: str) -> None:
    assert scan_code(code).opaque_reasons == ()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="type parameters are Python 3.12 syntax")
def test_type_parameters_are_bindings() -> None:
    assert any("rebinds tools" in r for r in scan_code("def f[tools]():\n    pass").opaque_reasons)
    assert any("__globals__" in r for r in scan_code("class C[**__globals__]:\n    pass").opaque_reasons)


def _name_fields_offered() -> set[tuple[str, str]]:
    """Every (node type, field) of the running Python's ``ast`` that can hold a name or a string.

    Two sources, so that neither Python 3.11 (no ``_field_types``) nor a later Python whose docstrings change
    can hide one: the ASDL signature in each node's docstring (``identifier``, ``string`` and ``constant``
    fields, with their ``?`` and ``*`` forms), and, from 3.13, ``_field_types`` entries typed ``str``,
    ``str | None`` or ``list[str]``.
    """
    classes: set[type] = set()
    pending = [ast.AST]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            if sub not in classes:
                classes.add(sub)
                pending.append(sub)
    classes |= {c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.AST)}
    offered: set[tuple[str, str]] = set()
    for cls in classes:
        if not cls.__module__.startswith("ast") or not getattr(cls, "_fields", ()):
            continue
        signature = (cls.__doc__ or "").split("\n", 1)[0]
        if signature.startswith(f"{cls.__name__}("):
            for kind, field in re.findall(r"(\w+)[?*]? (\w+)", signature[len(cls.__name__) + 1:]):
                if kind in ("identifier", "string", "constant"):
                    offered.add((cls.__name__, field))
        # A class's own ``_field_types`` only: 3.13's deprecated aliases (``ast.Str``...) inherit Constant's, and
        # ``ast.parse`` never makes them.
        for field, annotation in vars(cls).get("_field_types", {}).items():
            if annotation in (str, str | None, list[str]):
                offered.add((cls.__name__, field))
    return offered


def test_the_scan_has_judged_every_name_the_syntax_tree_can_carry() -> None:
    """Fails on a Python whose ``ast`` adds a node or field holding a name that ``NAME_FIELDS`` does not list:
    until someone decides how the scan reads it, such code is opaque (below), but the table must say so."""
    offered = _name_fields_offered()
    assert ("MatchClass", "kwd_attrs") in offered and ("Attribute", "attr") in offered  # the introspection works
    unjudged = offered - set(NAME_FIELDS)
    assert not unjudged, f"the scan has no rule for {sorted(unjudged)}; add each to policy.scan_names.NAME_FIELDS"
    known_here = {(node, field) for node, field in NAME_FIELDS if hasattr(ast, node)}
    assert known_here <= offered, f"NAME_FIELDS lists fields this Python does not have: {sorted(known_here - offered)}"


def test_a_name_field_without_a_rule_makes_the_code_opaque(monkeypatch) -> None:
    monkeypatch.delitem(scan_names.NAME_FIELDS, ("MatchClass", "kwd_attrs"))
    signature = scan_code("match x:\n    case dict(status=s):\n        pass")
    assert any("MatchClass.kwd_attrs" in reason for reason in signature.opaque_reasons), signature.opaque_reasons


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


def test_a_literal_looked_up_on_tools_is_never_repeated_to_approvers() -> None:
    """A getattr's string literal is any text the model wrote: shown as a tool name it drew a live mention, an
    image and a forged "read-only" line in the review post. A name the tools object cannot have is no tool,
    and the reason does not echo it."""
    code = ('await tools.kill_task(1)\nif False:\n    await getattr(tools, "x)** @channel ![](https://evil.example/p)'
            '\\n\\n**read-only** (")()')
    signature = scan_code(code)
    assert signature.tools == ("kill_task",)
    assert signature.opaque
    assert not any("@channel" in r or "evil" in r for r in signature.opaque_reasons), signature.opaque_reasons


@pytest.mark.parametrize("code", [
    'import pickle\nt = pickle.loads(b"c__main__\\ntools\\n.")\nawait t.kill_task(task_id=task_id)\n',
    'from pickle import loads\n',
    'import pydoc\nt = pydoc.locate("mod.tools")\n',
    'import pkgutil\n',
    'from unittest import mock\n',
    'import logging.config\n',
    'from logging import config\n',
    'import timeit\ntimeit.timeit("print(1)", number=1)\n',
    'import cProfile\n',
    'import runpy\n',
    'import marshal\n',
    'x = "__main__" + ".tools"\n',
    'import typing\nclass A:\n    x: "tools.kill_task(task_id=task_id) or int"\ntyping.get_type_hints(A)\n',
    'from typing import get_type_hints as hints\n',
    'from typing import ForwardRef\n',
    'from functools import singledispatch\n',
    # the same modules reached as attributes of modules that import them (a second review's routes, each of
    # which ran a kill hidden from the review in the bwrap sandbox)
    'import tracemalloc\nt = tracemalloc.pickle.loads(f"c{__name__}\\ntools\\n.".encode())\n',
    'import logging.handlers\nlogging.handlers.pickle\n',
    'from multiprocessing.reduction import ForkingPickler\n',
    'import dataclasses\nm = dataclasses.inspect.getmodule(dataclasses)\n',
    'import xmlrpc.server\nxmlrpc.server.pydoc\n',
    'import pstats\npstats.marshal\n',
    'def f(n: "tools.kill_task(task_id=1)"): pass\nann = f.__annotations__\n',
    'import functools\nh = functools.get_annotations if False else None\nx = dict(eval_str=True)\n',
    # a third review's routes, with "__main__" built at run time so no dunder is written
    'import os, string\nt, _ = string.Formatter().get_field("0.sys.modules", (os,), {})\n',
    'import os, xmlrpc.server\nm = xmlrpc.server.resolve_dotted_attribute(os, "sys.modules")\n',
    'import multiprocessing\nr, w = multiprocessing.Pipe(duplex=False)\n',
    'from multiprocessing.connection import Pipe\n',
    'from concurrent.futures import ProcessPoolExecutor\n',
    'main = lookup("_" * 2 + "main" + "_" * 2)\nawait main.tools.kill_task(task_id=task_id)\n',
])
def test_code_that_finds_objects_by_names_in_text_is_opaque(code: str) -> None:
    """Review finding: the script runs as the module "__main__" (a script's semantics), so a lookup by text
    reaches its names: `pickle.loads(b"c__main__\\ntools\\n.")` returned the tools object, and a kill called
    through it was in no review's tool list; `typing.get_type_hints` evaluated an annotation written as text."""
    assert scan_code(code).opaque, code


@pytest.mark.parametrize("code", [
    'if __name__ == "__main__":\n    await tools.get_task(task_id=task_id)\n',
    'if "__main__" != __name__:\n    pass\n',
    'import logging\nlogging.info("done")\n',
    'from typing import Any\nx: Any = 1\n',
    "import json, re, datetime, collections, statistics, math, itertools, time\n",
    "from collections import Counter, defaultdict\nfrom datetime import datetime, timedelta, timezone\n",
    "import urllib.parse\nfrom xml.etree import ElementTree\nimport csv, io, hashlib, base64\n",
    "import functools\ndef deco(f):\n    @functools.wraps(f)\n    def inner(*a):\n        return f(*a)\n    return inner\n",
    "from collections import namedtuple\nP = namedtuple('P', 'a b')\nq = P(1, 2)._replace(a=3)._asdict()\n",
    "import contextlib, io\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n    print(1)\n",
    "from pathlib import Path\np = Path('/tmp').resolve()\n",
])
def test_everyday_code_stays_analysable(code: str) -> None:
    """What the opaque rules above must not catch: the main-module check, the everyday standard library, and the
    everyday uses of the libraries whose internals are routes (wraps with its default names, namedtuples'
    private-looking API, a redirect into a buffer)."""
    assert not scan_code(code).opaque, scan_code(code).opaque_reasons


@pytest.mark.parametrize("module", ["this", "antigravity", "numpy", "sqlite3", "ctypes.util", "idlelib", "turtle"])
def test_a_module_the_scan_does_not_know_makes_the_code_opaque(module: str) -> None:
    """Three reviews each found modules resolving names given as text that the scan let through; a list of such
    modules is never complete, so analysable code imports only modules the scan knows."""
    assert scan_code(f"import {module}\n").opaque
    assert scan_code(f"from {module} import x\n").opaque



# A fourth review's routes: each imports only modules the scan knows, names the kill visibly only under a branch
# that never runs (so it is in the allow-set), and in the bwrap sandbox ran a hidden kill through library
# internals the scan did not follow.
# The kill each route names visibly, under a branch that never runs (so the review lists it), before the route.
GUARDED_KILL = """\
dry_run = True
if not dry_run:
    await tools.kill_task(task_id=1)  # guarded: never runs
info = await tools.get_task(task_id=7)
"""
# An object of the script's that keeps every value a library sets on it.
CATCHER = """\
seen = []
class Box:
    def __setattr__(self, name, value):
        seen.append(value)
"""
FOURTH_REVIEW_ROUTES = {
    # a redirect's private stream target reads the module table
    "a_contextlib": """\
import contextlib
""" + GUARDED_KILL + """\
probe = contextlib.redirect_stdout({})
probe._stream = "modules"
with probe:
    table = probe._old_targets[0]
stub = table["sandbox" + "_tools"]
hidden = await stub.kill_task(task_id=666)
return {"status": info["status"], "hidden": hidden}
""",
    # update_wrapper copies collections._sys.modules into an object of the script's
    "b_update_wrapper": """\
import collections
import functools
""" + CATCHER + GUARDED_KILL + """\
functools.update_wrapper(Box(), collections._sys, assigned=("modules",), updated=())
stub = seen[0]["sandbox" + "_tools"]
hidden = await stub.kill_task(task_id=667)
return {"status": info["status"], "hidden": hidden}
""",
    # typing.List[text] makes a ForwardRef whose _evaluate runs the text
    "c_forwardref": """\
import typing
""" + GUARDED_KILL + """\
text = "_" * 2 + "import" + "_" * 2 + "('sys').mod" + "ules['sandbox" + "_tools'].kill_task"
ref = typing.get_args(typing.List[text])[0]
kill = ref._evaluate({}, {}, frozenset())
hidden = await kill(task_id=668)
return {"status": info["status"], "hidden": hidden}
""",
    # make_parser imports logging.config by name; its configurator resolves text
    "d_sax_logging_config": """\
import logging
import xml.sax
""" + GUARDED_KILL + """\
try:
    xml.sax.make_parser(["logging.config"])   # imports logging.config by name, then fails on create_parser
except AttributeError:
    pass
kill = logging.config.BaseConfigurator({}).resolve("sandbox" + "_tools.kill_task")
hidden = await kill(task_id=669)
return {"status": info["status"], "hidden": hidden}
""",
    # wraps copies f_locals of the task's frames; the runner's hold the stub module
    "e_wraps_task_frame": """\
import asyncio
import functools
""" + CATCHER + """\
info = await tools.get_task(task_id=7)
if info["status"] == "never":
    await tools.kill_task(task_id=7)  # shown to the approver, guarded
for frame in asyncio.current_task().get_stack():   # the runner's coroutine and the script's, as frames
    functools.wraps(frame, assigned=("f_" + "locals",), updated=())(Box())
runner_locals = [scope for scope in seen if isinstance(scope, dict) and "mod" + "ule" in scope][0]   # run_script's: the stub is "module"
hidden = await runner_locals["mod" + "ule"].kill_task(task_id=670)
return {"status": info["status"], "hidden": hidden}
""",
}


@pytest.mark.parametrize("code", list(FOURTH_REVIEW_ROUTES.values()), ids=list(FOURTH_REVIEW_ROUTES))
def test_library_internals_reached_by_private_attributes_frames_or_copied_names_are_opaque(code: str) -> None:
    assert scan_code(code).opaque
