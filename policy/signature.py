"""Procedure signature: the set of tools a block of code references, read from its syntax tree.

This scan is ADVISORY. It decides what to show an operator, names and de-duplicates procedures, and
pre-screens stored procedures before an automatic phase replays them. It is never the enforcement
boundary: the sandbox bridge checks every call's resolved tool name against the run's allow-set at call
time, which is what stops code the scan misread.

The scan over-approximates on purpose. It records every *reference* to a tool, not only calls, so an
alias such as ``m = tools.kill_task; await m()`` puts ``kill_task`` in the signature even though the call
site only says ``m()``. Where the code reaches tools in a way a syntax tree cannot follow (a ``getattr``
with a computed name, ``tools`` passed around as a value, ``eval``/``exec``, dunder attribute walks, a
star import from the stub module, code that does not parse) the signature is marked **opaque**, and every
caller treats opaque code as not read-only.

Names are judged wherever the syntax tree holds them, not only in ``x.attr``: ``match`` class patterns
(``case object(__globals__=g)`` is the walk ``x.__globals__`` is) and mapping patterns, ``from m import name``,
keyword and binding names, and strings, which ``attrgetter`` or ``str.format`` can turn into attribute
lookups. Which field of which node holds a name, and the rule for it, is the table in ``policy.scan_names``;
a name in a field the table does not list makes the code opaque.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from policy.scan_names import NAME_FIELDS, NameRule, names_in
from policy.tool_surface import BRIDGE_CALL, STUB_MODULE, TOOLS_OBJECT, python_names

# The sandbox's own names (policy.tool_surface), never a copy: a scan that looks for another module name
# than the one the sandbox injects reads every import of the real one as harmless.
DEFAULT_TOOLS_OBJECT = TOOLS_OBJECT
DEFAULT_STUB_MODULE = STUB_MODULE

# Builtins that evaluate text as code or expose namespaces by name: through them code can reach the tools
# object (or anything else) without the scan seeing a name it can follow.
_DYNAMIC_BUILTINS = frozenset(
    {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "__builtins__"}
)
# Names the site module defines, and the sandbox's Python (started without it) does not: a script that calls
# exit() stops there, while in the sandbox the NameError could be suppressed and the code after it ran.
_SITE_BUILTINS = frozenset({"exit", "quit", "help", "copyright", "credits", "license"})
# Modules whose purpose is reaching objects by computed names or poking at interpreter internals.
# traceback, pdb, bdb and cgitb read frames (a frame's locals among them) without naming sys or inspect.
_INTROSPECTION_MODULES = frozenset({"importlib", "sys", "builtins", "inspect", "gc", "ctypes",
                                    "traceback", "pdb", "bdb", "cgitb"})
# Modules that run text as code (timeit, doctest, code, runpy, cProfile.run...) or find an object by a name
# given as text or bytes (pickle, pydoc.locate, pkgutil.resolve_name, unittest.mock.patch, logging.config's
# "ext://"): the script runs as the module "__main__", so "__main__.tools" found the tools object with no name
# the scan could follow (`pickle.loads(b"c__main__\ntools\n.")`).
_TEXT_RUNNING_MODULES = frozenset({
    "pickle", "_pickle", "pickletools", "copyreg", "shelve", "marshal", "pydoc", "pkgutil", "timeit", "doctest",
    "code", "codeop", "runpy", "unittest", "trace", "profile", "cProfile", "zipimport", "dill", "cloudpickle",
    "logging.config",
    # pickling underneath: multiprocessing's pipes and queues unpickle what is sent through them, and
    # concurrent.futures' process pools use them; xmlrpc resolves dotted attribute names given as text
    "multiprocessing", "concurrent", "xmlrpc",
})
# The modules analysable code may import. Each review found another module that resolves a name given as text
# (the script is the module "__main__", so "__main__.tools" reaches the tools object): a list of such modules
# is never complete, so code importing a module outside this one (the standard library's plain data, text,
# time, maths and file helpers) is unanalysable: shown as such, approved only by those who approve state changes.
_KNOWN_MODULES = frozenset({
    "__future__", "abc", "array", "ast", "asyncio", "base64", "binascii", "bisect", "bz2", "calendar", "cmath",
    "collections", "colorsys", "contextlib", "contextvars", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "email", "enum", "errno", "fnmatch", "fractions", "functools", "getpass", "glob", "graphlib",
    "gzip", "hashlib", "heapq", "hmac", "html", "http", "io", "ipaddress", "itertools", "json", "keyword",
    "locale", "logging", "lzma", "math", "numbers", "operator", "os", "pathlib", "platform", "pprint", "queue",
    "random", "re", "reprlib", "sched", "secrets", "select", "shlex", "shutil", "signal", "socket", "statistics",
    "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading", "time", "tomllib", "types",
    "typing", "unicodedata", "urllib", "uuid", "warnings", "weakref", "xml", "zipfile", "zlib", "zoneinfo",
})
# Callables that walk a dotted name given as text to the object it names ("0.sys.modules[...].tools"), wherever
# they are reached from: string.Formatter().get_field, xmlrpc's resolve_dotted_attribute.
_NAME_RESOLVERS = frozenset({"get_field", "Formatter", "resolve_dotted_attribute", "BaseConfigurator",
                             "DictConfigurator", "dictConfig", "fileConfig"})
# Callables that evaluate annotations given as text in the namespace of the code that defined them (so a
# string annotation "tools.kill_task(...)" is a call the scan cannot see), wherever they are imported from.
_STRING_EVALUATORS = frozenset({"get_type_hints", "ForwardRef", "_eval_type", "evaluate_forward_ref",
                                "singledispatch", "singledispatchmethod", "get_annotations", "eval_str"})
# Those modules are reachable without an import, as attributes of modules that import them
# (``tracemalloc.pickle``, ``logging.handlers.pickle``, ``xmlrpc.server.pydoc``, ``dataclasses.inspect``), and
# so are their picklers: such an attribute makes code opaque as the import does. Not "code", "trace" or
# "profile" (ordinary attribute names; only modules already opaque, pdb and cProfile, import them).
_MODULE_ATTRIBUTES = frozenset(
    {top for top in (m.split(".")[0] for m in _INTROSPECTION_MODULES | _TEXT_RUNNING_MODULES)}
    - {"code", "trace", "profile", "logging"}
) | {"ForkingPickler", "Pickler", "Unpickler", "_Pickler", "_Unpickler"}
# Frame and code attributes: a generator's or traceback's frame exposes the globals (and so ``tools``)
# under no name the scan could follow.
_FRAME_ATTRIBUTES = frozenset(
    {
        "f_globals", "f_locals", "f_builtins", "f_back", "f_code",
        "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next",
        # and what hands frames out: a task's stack (the runner's frames hold the stub module)
        "get_stack", "print_stack", "_getframe", "_current_frames",
    }
)
# Library internals are one private attribute away (``collections._sys``, a redirect's ``_stream``, a
# ForwardRef's ``_evaluate``): a private attribute makes code opaque, but for namedtuples' public API.
_PUBLIC_PRIVATE_NAMES = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})
# Callables that copy attributes named by their arguments (``functools.update_wrapper(x, y, assigned=(...))``
# read ``y.<name>``): only their everyday shape, with the default names, is followed.
_ATTRIBUTE_COPIERS = {"wraps": 1, "update_wrapper": 2}
# Callables that import a module named by their argument (``xml.sax.make_parser(["logging.config"])``).
_IMPORTING_CALLABLES = frozenset({"make_parser"})
# Dunder names ordinary orchestration code may use without walking the object graph.
_HARMLESS_DUNDERS = frozenset({"__name__", "__doc__", "__init__"})
# Dunders text may name. Not "__main__": the script runs as that module, so a text-driven lookup
# ("__main__.tools") reaches its names; ``__name__ == "__main__"`` is allowed as what it is (_is_main_check).
_HARMLESS_DUNDER_TEXT = _HARMLESS_DUNDERS
# The one dunder module an import may name: it changes how the code compiles, and reaches nothing.
_HARMLESS_DUNDER_MODULES = frozenset({"__future__"})
# Attributes through which any module object leads to the interpreter's module table (``os.sys.modules``):
# the stub module is registered there, so code could reach a tool without naming ``tools`` at all.
_MODULE_TABLE_ATTRIBUTES = frozenset({"sys", "modules", "builtins", "importlib"})
_NAME_LOOKUP_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
# ``operator``'s callables that look attributes up by the (dotted) names they are given.
_NAME_LOOKUP_CALLABLES = frozenset({"attrgetter", "methodcaller"})
# Classes whose one positional sub-pattern matches the subject itself; any other class matches positional
# sub-patterns against the attributes its ``__match_args__`` names, which are not in the code.
_SELF_MATCHING_CLASSES = frozenset(
    {"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"}
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The names the tools object can have (tool_surface gives every tool a plain ASCII identifier).
_TOOL_ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ScanConventions(BaseModel):
    """How generated code reaches tools: the injected object's name, the stub module's name, and the map from
    the Python attribute names the stub defines to the real tool names they call.

    Without the map a scanned name is taken as the tool name itself; with it (``for_tools``), ``tools.x``
    is recorded as the tool the stub's ``x`` really calls, so a tool whose name is not an identifier is
    judged by its own flags and never by those of a look-alike.
    """

    model_config = ConfigDict(frozen=True)

    tools_object: str = DEFAULT_TOOLS_OBJECT
    stub_module: str = DEFAULT_STUB_MODULE
    python_names: Mapping[str, str] = Field(default_factory=dict)

    @classmethod
    def for_tools(cls, tool_names: Iterable[str]) -> "ScanConventions":
        return cls(python_names=python_names(tool_names))

    def real_name(self, python_name: str) -> str:
        return self.python_names.get(python_name, python_name)


DEFAULT_CONVENTIONS = ScanConventions()


class CodeSignature(BaseModel):
    """What the static scan found: referenced tool names (sorted, unique), the lines each is referenced on
    (so a reviewer's view can point at them), and why the code is opaque, if it is."""

    model_config = ConfigDict(frozen=True)

    tools: tuple[str, ...] = ()
    opaque_reasons: tuple[str, ...] = ()
    lines: Mapping[str, tuple[int, ...]] = Field(default_factory=dict)

    @property
    def opaque(self) -> bool:
        return bool(self.opaque_reasons)


def scan_code(code: str, conventions: ScanConventions = DEFAULT_CONVENTIONS) -> CodeSignature:
    """Return the tools ``code`` references and any reason the scan cannot vouch for that list."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return CodeSignature(opaque_reasons=(f"does not parse: {exc.msg} (line {exc.lineno})",))
    except (ValueError, RecursionError, MemoryError) as exc:
        return CodeSignature(opaque_reasons=(f"does not parse: {type(exc).__name__}",))
    scanner = _Scanner(conventions)
    try:
        scanner.scan(tree)
    except RecursionError:
        return CodeSignature(opaque_reasons=("too deeply nested to analyse",))
    return CodeSignature(
        tools=tuple(sorted(scanner.tools)),
        opaque_reasons=tuple(sorted(scanner.reasons)),
        lines={name: tuple(sorted(found)) for name, found in sorted(scanner.lines.items())},
    )


def procedure_signature(code: str, conventions: ScanConventions = DEFAULT_CONVENTIONS) -> tuple[str, ...]:
    """The sorted tool names that identify a procedure (advisory; see the module docstring)."""
    return scan_code(code, conventions).tools


def _is_main_check(node: ast.AST, parent: ast.AST | None) -> bool:
    """``node`` is the text "__main__" compared with ``__name__`` (``if __name__ == "__main__":``)."""
    return (isinstance(node, ast.Constant) and node.value == "__main__" and isinstance(parent, ast.Compare)
            and any(isinstance(side, ast.Name) and side.id == "__name__" for side in (parent.left, *parent.comparators)))


class _Scanner:
    """Collects tool references in one pass over a parsed module.

    Scopes are ignored on purpose: a ``tools.<name>`` anywhere counts, whatever ``tools`` is bound to
    there. That can only add names, which is the safe direction for an advisory scan.
    """

    def __init__(self, conventions: ScanConventions) -> None:
        self.conventions = conventions
        self.tools: set[str] = set()
        self.lines: dict[str, set[int]] = {}
        self.reasons: set[str] = set()
        # Names bound to the tools object and names bound to the stub module itself.
        self.tool_objects: set[str] = {conventions.tools_object}
        self.stub_modules: set[str] = set()
        self.parents: dict[int, ast.AST] = {}

    def scan(self, tree: ast.Module) -> None:
        nodes = list(ast.walk(tree))
        for node in nodes:
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        # Imports first, so uses that appear before an import in the walk order still resolve.
        for node in nodes:
            if isinstance(node, ast.Import):
                self._visit_import(node)
            elif isinstance(node, ast.ImportFrom):
                self._visit_import_from(node)
        for node in nodes:
            self._judge_names(node)
            if isinstance(node, ast.Name):
                self._visit_name(node)
            elif isinstance(node, ast.Attribute):
                self._visit_attribute(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                self._check_string(node.value.decode("latin-1"))
            elif isinstance(node, ast.Call):
                self._visit_call(node)
            elif isinstance(node, ast.MatchClass):
                self._visit_match_class(node)
            elif isinstance(node, ast.MatchMapping):
                self._visit_match_mapping(node)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                # The sandbox runs the code as a function's body (child_runner): a script's "global x" in a
                # def names the script's x, the sandbox's names another variable, and a guard set through it
                # (global dry_run; dry_run = True) never reached the kill it guarded.
                self.reasons.add(f"declares {type(node).__name__.lower()} names, which the sandbox (running the "
                                 "code as a function's body) binds elsewhere than a script would")

    # -- names, wherever the syntax tree holds them ----------------------------------------------------

    def _judge_names(self, node: ast.AST) -> None:
        if _is_main_check(node, self.parents.get(id(node))):
            return
        kind = type(node).__name__
        for field, value in ast.iter_fields(node):
            names = names_in(value)
            if not names:
                continue
            rule = NAME_FIELDS.get((kind, field))
            if rule is None:
                self.reasons.add(f"uses {kind}.{field}, a name this scan has no rule for")
                continue
            for name in names:
                self._apply(rule, name)

    def _apply(self, rule: NameRule, name: str) -> None:
        if rule is NameRule.ATTRIBUTE:
            self._check_lookup(name)
        elif rule is NameRule.BINDING:
            self._check_plain_name(name)
            self._check_rebinding(name)
        elif rule is NameRule.DEFINITION:
            self._check_rebinding(name)
        elif rule is NameRule.KEYWORD:
            self._check_attribute_name(name)
        elif rule is NameRule.STRING:
            self._check_string(name)
        # REFERENCE, IMPORTED and MODULE names are judged by the visitors below, which see their context;
        # NOT_A_NAME fields hold no name.

    # -- imports ---------------------------------------------------------------------------------------

    def _visit_import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module_path(alias.name)
            if alias.asname:
                self._check_plain_name(alias.asname)
            top = alias.name.split(".")[0]
            if top == self.conventions.stub_module:
                if alias.name != self.conventions.stub_module:
                    self.reasons.add(f"imports a submodule of the tool stub module ({alias.name})")
                self.stub_modules.add(alias.asname or top)
                continue
            if top in _INTROSPECTION_MODULES:
                self.reasons.add(f"imports {alias.name}, which can reach objects by computed names")
            self._check_text_running(alias.name)
            self._check_rebinding(alias.asname or top)

    def _visit_import_from(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_module_path(module)
        for alias in node.names:
            if alias.asname:
                self._check_plain_name(alias.asname)
        top = module.split(".")[0]
        if top in _INTROSPECTION_MODULES:
            self.reasons.add(f"imports from {module}, which can reach objects by computed names")
            return
        if node.level:
            self.reasons.add("imports relative to a package, which the sandbox's script is not")
        elif top != self.conventions.stub_module:
            self._check_text_running(module)
            for alias in node.names:
                self._check_text_running(f"{module}.{alias.name}")
        if top != self.conventions.stub_module:
            for alias in node.names:
                if alias.name != "*":
                    self._check_lookup(alias.name)  # ``from m import x`` reads ``m.x``
                self._check_rebinding(alias.asname or alias.name)
            return
        if module != self.conventions.stub_module or node.level:
            self.reasons.add(f"imports from a submodule of the tool stub module ({module})")
            return
        for alias in node.names:
            if alias.name == "*":
                self.reasons.add(f"star import from {module} hides which tools are used")
            elif alias.name == self.conventions.tools_object:
                self.tool_objects.add(alias.asname or alias.name)
            elif alias.name.startswith("_"):
                self.reasons.add(f"imports private name {alias.name} from {module}")
            else:
                # The import binding is the reference: any later alias of it is covered.
                self._add(alias.name, node)

    # -- uses ------------------------------------------------------------------------------------------

    def _visit_name(self, node: ast.Name) -> None:
        if node.id in _DYNAMIC_BUILTINS:
            self.reasons.add(f"uses {node.id}, which can reach tools by computed names")
            return
        self._check_attribute_name(node.id)
        if node.id in _NAME_LOOKUP_BUILTINS | _NAME_LOOKUP_CALLABLES | _ATTRIBUTE_COPIERS.keys() | _IMPORTING_CALLABLES:
            self._check_called(node, node.id)
        if node.id == "dir":
            self._check_dir(node)
        if node.id in _SITE_BUILTINS:
            self.reasons.add(f"uses {node.id}, which the sandbox's Python (started without the site module) does "
                             "not define")
        if node.id in self.tool_objects:
            self._visit_tool_object_use(node)
        elif node.id in self.stub_modules:
            self._visit_stub_module_use(node)

    def _check_dir(self, node: ast.Name) -> None:
        """``dir(x)`` lists x; ``dir()`` lists the scope it is called in, and the code's top level runs as a
        function's body whose names are its module's, so it listed none of them ("dry_run" not in dir() was
        true and a kill guarded by it ran). Only ``dir`` called with an argument is followed."""
        parent = self.parents.get(id(node))
        if not (isinstance(parent, ast.Call) and parent.func is node and (parent.args or parent.keywords)):
            self.reasons.add("uses dir() without an argument (or dir as a value): in the sandbox it does not list "
                             "the names a script would")

    def _visit_tool_object_use(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.reasons.add(f"rebinds or deletes {node.id}")
            return
        self._resolve_member_access(node, node.id)

    def _visit_stub_module_use(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.reasons.add(f"rebinds or deletes {node.id}")
            return
        parent = self.parents.get(id(node))
        if (
            isinstance(parent, ast.Attribute)
            and parent.value is node
            and parent.attr == self.conventions.tools_object
        ):
            # ``stub.tools.<name>``: the attribute is the tools object itself.
            self._resolve_member_access(parent, f"{node.id}.{parent.attr}")
            return
        self._resolve_member_access(node, node.id)

    def _visit_attribute(self, node: ast.Attribute) -> None:
        if node.attr in _NAME_LOOKUP_CALLABLES:
            self._check_called(node, node.attr)
        if node.attr in _ATTRIBUTE_COPIERS or node.attr in _IMPORTING_CALLABLES:
            self._check_called(node, node.attr)
        if node.attr == "config" and isinstance(node.value, ast.Name) and node.value.id == "logging":
            self.reasons.add("reaches logging.config, which finds objects by names given as text")
        if node.attr in self.tool_objects and not (isinstance(node.value, ast.Name) and node.value.id in self.stub_modules):
            # ``something.tools``: the script's module reached some other way ("__main__" built at run time)
            self.reasons.add(f"reaches .{node.attr} on another object, where the scan cannot follow the tools used")

    def _check_called(self, node: ast.expr, name: str) -> None:
        """A name-lookup function (``getattr``, ``attrgetter``...) may only be called where it is named."""
        parent = self.parents.get(id(node))
        if not (isinstance(parent, ast.Call) and parent.func is node):
            self.reasons.add(f"uses {name} as a value, so the names it looks up cannot be followed")

    def _resolve_member_access(self, node: ast.expr, shown_as: str) -> None:
        """``node`` denotes the tools object (or the stub module): accept only ``.name`` or ``getattr(x, "name")``."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if not isinstance(parent.ctx, ast.Load):
                self.reasons.add(f"rebinds or deletes {shown_as}.{parent.attr}")
            self._record_tool(parent.attr, shown_as, parent)
            return
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id in ("getattr", "hasattr")
            and parent.args
            and parent.args[0] is node
        ):
            if len(parent.args) >= 2 and _literal_string(parent.args[1]) is not None:
                self._record_tool(_literal_string(parent.args[1]) or "", shown_as, parent)
            else:
                self.reasons.add(f"looks up an attribute of {shown_as} by a computed name")
            return
        self.reasons.add(f"uses {shown_as} as a value, so the tools it reaches cannot be followed")

    def _record_tool(self, name: str, shown_as: str, where: ast.AST) -> None:
        # A string literal can hold any text, and a recorded name is shown to approvers as a tool: only a name
        # the tools object can have (an ASCII identifier, tool_surface) is recorded, and an odd one is not
        # repeated in the reason (a getattr's literal once drew a live "read-only" line in a review post).
        if not _TOOL_ATTRIBUTE.fullmatch(name):
            self.reasons.add(f"looks up an attribute of {shown_as} whose name is not a plain identifier")
        elif name.startswith("_"):
            self.reasons.add(f"touches non-tool attribute {shown_as}.{name}")
        else:
            self._add(name, where)

    def _add(self, python_name: str, where: ast.AST) -> None:
        real = self.conventions.real_name(python_name)
        self.tools.add(real)
        self.lines.setdefault(real, set()).add(getattr(where, "lineno", 0))

    def _visit_call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in _ATTRIBUTE_COPIERS and (len(node.args) > _ATTRIBUTE_COPIERS[name] or any(
                k.arg in (None, "assigned", "updated") for k in node.keywords)):
            self.reasons.add(f"calls {name} with the attribute names it copies, which the scan cannot follow")
        if name in _IMPORTING_CALLABLES and (node.args or node.keywords):
            self.reasons.add(f"calls {name} with module names, which it imports")
        if isinstance(func, ast.Name) and name in _NAME_LOOKUP_BUILTINS:
            looked_up = node.args[1:2] if len(node.args) >= 2 else [None]
        elif name in _NAME_LOOKUP_CALLABLES:
            # ``attrgetter("a", "b.c")`` looks up every argument; ``methodcaller("m", *args)`` only the first.
            looked_up = (node.args if name == "attrgetter" else node.args[:1]) or [None]
            if node.keywords and name == "attrgetter":
                looked_up = [None]
        else:
            return
        for argument in looked_up:
            attribute = _literal_string(argument) if argument is not None else None
            if attribute is None:
                self.reasons.add(f"calls {name} with a computed attribute name")
                continue
            for part in attribute.split("."):
                self._check_lookup(part)

    def _visit_match_class(self, node: ast.MatchClass) -> None:
        # ``kwd_attrs`` are judged as attribute names by the table; positional sub-patterns read the attributes
        # the class's ``__match_args__`` names, which only the self-matching builtins make visible here.
        if node.patterns and not (isinstance(node.cls, ast.Name) and node.cls.id in _SELF_MATCHING_CLASSES):
            shown = ast.unparse(node.cls)[:60]
            self.reasons.add(f"matches {shown}(...) by position, so the attributes it reads ({shown}.__match_args__) "
                             "are not in the code")

    def _visit_match_mapping(self, node: ast.MatchMapping) -> None:
        # A mapping pattern against a namespace (``globals()``, a function's ``__globals__``) reads names like an
        # attribute walk does; keys naming dunders, frame attributes or the tools are refused whatever the subject.
        for key in node.keys:
            try:
                value = ast.literal_eval(key)
            except (ValueError, TypeError):
                self.reasons.add(f"matches a mapping key computed from {ast.unparse(key)[:60]}, which the scan "
                                 "cannot read")
                continue
            if not isinstance(value, str):
                continue
            risky = {self.conventions.tools_object, self.conventions.stub_module, BRIDGE_CALL}
            if value in risky or any(_is_walk_name(word, _HARMLESS_DUNDERS) for word in _WORD.findall(value)):
                self.reasons.add(f"matches the mapping key {value[:60]!r}, which reads a namespace by name")

    def _check_lookup(self, name: str) -> None:
        """``name`` is looked up on an object: the attribute-walk rules, and the routes to the module table."""
        self._check_attribute_name(name)
        if name.startswith("_") and not name.startswith("__") and name not in _PUBLIC_PRIVATE_NAMES:
            self.reasons.add(f"reaches the private attribute {name}, where library internals (a module table, a "
                             "stream's target) are a step away")
        if name in _MODULE_TABLE_ATTRIBUTES:
            self.reasons.add(f"reaches .{name}, which leads to the interpreter's module table")

    def _check_plain_name(self, name: str) -> None:
        """A name bound or read without an ``ast.Name`` node: the rules ``_visit_name`` applies to ``Name.id``."""
        if name in _DYNAMIC_BUILTINS:
            self.reasons.add(f"uses {name}, which can reach tools by computed names")
        else:
            self._check_attribute_name(name)

    def _check_module_path(self, path: str) -> None:
        for part in path.split("."):
            if part.startswith("__") and part.endswith("__") and part not in _HARMLESS_DUNDER_MODULES:
                self.reasons.add(f"touches dunder name {part}, which can walk to unrestricted objects")

    def _check_text_running(self, path: str) -> None:
        """``path``, a module imported (or a name imported from one), runs text or finds objects by name, or is
        not one the scan knows (_KNOWN_MODULES)."""
        parts = path.split(".")
        if parts[0] not in _KNOWN_MODULES and parts[0] not in _INTROSPECTION_MODULES | _TEXT_RUNNING_MODULES:
            self.reasons.add(f"imports {parts[0]}, a module this scan does not know (only well-known modules are "
                             "read as analysable; another could find objects by names given as text)")
            return
        for end in range(1, len(parts) + 1):
            if ".".join(parts[:end]) in _TEXT_RUNNING_MODULES:
                self.reasons.add(f"imports {path}, which runs text as code or finds objects by names given as "
                                 "text (the script's own among them)")
                return

    def _check_attribute_name(self, name: str) -> None:
        if name in _NAME_RESOLVERS:
            self.reasons.add(f"uses {name}, which walks a dotted name given as text to the object it names")
        if name in _MODULE_ATTRIBUTES:
            self.reasons.add(f"reaches .{name}, a module (or its pickler) that finds objects by computed names or "
                             "names in text")
        if name in _STRING_EVALUATORS:
            self.reasons.add(f"uses {name}, which evaluates annotations written as text, where the scan cannot "
                             "follow them")
        if name.startswith("__") and name.endswith("__") and name not in _HARMLESS_DUNDERS:
            self.reasons.add(f"touches dunder name {name}, which can walk to unrestricted objects")
        elif name in _FRAME_ATTRIBUTES:
            self.reasons.add(f"touches frame attribute {name}, which exposes globals by computed names")

    def _check_string(self, text: str) -> None:
        for name in (self.conventions.stub_module, BRIDGE_CALL):
            if name in text:
                self.reasons.add(f"names {name} in a string, which can reach it by a computed name")
        # Text becomes an attribute lookup through ``attrgetter``, ``str.format`` fields and the like.
        for word in set(_WORD.findall(text)):
            if _is_walk_name(word, _HARMLESS_DUNDER_TEXT):
                self.reasons.add(f"names {word} in a string, which can reach it by a computed name")

    def _check_rebinding(self, name: str) -> None:
        if name in self.tool_objects or name in self.stub_modules:
            self.reasons.add(f"rebinds {name}")


def _is_walk_name(name: str, harmless: frozenset[str]) -> bool:
    dunder = name.startswith("__") and name.endswith("__") and len(name) > 4
    return (dunder and name not in harmless) or name in _FRAME_ATTRIBUTES


def _literal_string(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None

