"""Every place Python's syntax tree holds a name, and the rule the static scan (``policy.signature``) judges it by.

A name the scan never reads is a name it cannot judge. ``match f: case object(__globals__=g): ...`` reads
``f.__globals__`` exactly as ``g = f.__globals__`` does, but the attribute name sits in
``MatchClass.kwd_attrs``, which the scan did not look at, so such code was titled read-only and offered
auto-run. The scan therefore reads names from this table, field by field, and treats a name in a field the
table does not list as opaque; a test compares the table with the ``ast`` of the Python it runs on, so a
new node type that can hold a name fails the test instead of passing the scan unread.
"""

from __future__ import annotations

from enum import Enum


class NameRule(str, Enum):
    """How the scan judges one kind of name."""

    # ``Name.id``: a plain name read or bound; the scan's name visitor follows the tools object and the stub
    # module through it, and refuses dynamic builtins (``eval``, ``globals``...), dunders and frame attributes.
    REFERENCE = "reference"
    # A name looked up on an object: dunders (beyond a harmless few), frame attributes and the attributes that
    # lead to the module table make the code opaque.
    ATTRIBUTE = "attribute"
    # A name the code binds without an ``ast.Name`` node (``case x as NAME``, ``except E as NAME``, parameters,
    # ``global NAME``, type parameters): judged like a plain name, and rebinding the tools object is opaque.
    BINDING = "binding"
    # ``def NAME`` / ``class NAME``: only rebinding the tools object or the stub module matters; a method named
    # ``__repr__`` reads nothing.
    DEFINITION = "definition"
    # A keyword argument's name: dunders and frame attributes are opaque (an attribute-setting or -reading
    # callee takes them by name), ordinary parameter names are not.
    KEYWORD = "keyword"
    # ``alias.name``: a module path in ``import`` and a module attribute in ``from ... import``; the import
    # visitors judge both (the latter as an ATTRIBUTE), and ``alias.asname`` as a binding that may alias the
    # tools object or the stub module.
    IMPORTED = "imported"
    # ``ImportFrom.module``: a module path, judged by the import visitor.
    MODULE = "module"
    # A string constant: it names the stub module, the bridge, a dunder or a frame attribute only as text that
    # code could turn into an attribute lookup (``attrgetter``, ``str.format``), so such strings are opaque.
    STRING = "string"
    # Not a name: type comments and type-ignore tags (``ast.parse`` without ``type_comments`` never fills
    # them), a string's ``u`` prefix, and ``case None``/``True``/``False``.
    NOT_A_NAME = "not_a_name"


# (node type, field) -> rule. Node types of newer Pythons are listed too; the scan ignores those it never sees.
NAME_FIELDS: dict[tuple[str, str], NameRule] = {
    ("Name", "id"): NameRule.REFERENCE,
    ("Attribute", "attr"): NameRule.ATTRIBUTE,
    ("MatchClass", "kwd_attrs"): NameRule.ATTRIBUTE,
    ("MatchAs", "name"): NameRule.BINDING,
    ("MatchStar", "name"): NameRule.BINDING,
    ("MatchMapping", "rest"): NameRule.BINDING,
    ("ExceptHandler", "name"): NameRule.BINDING,
    ("arg", "arg"): NameRule.BINDING,
    ("Global", "names"): NameRule.BINDING,
    ("Nonlocal", "names"): NameRule.BINDING,
    ("TypeVar", "name"): NameRule.BINDING,
    ("ParamSpec", "name"): NameRule.BINDING,
    ("TypeVarTuple", "name"): NameRule.BINDING,
    ("FunctionDef", "name"): NameRule.DEFINITION,
    ("AsyncFunctionDef", "name"): NameRule.DEFINITION,
    ("ClassDef", "name"): NameRule.DEFINITION,
    ("keyword", "arg"): NameRule.KEYWORD,
    ("alias", "name"): NameRule.IMPORTED,
    ("alias", "asname"): NameRule.IMPORTED,
    ("ImportFrom", "module"): NameRule.MODULE,
    ("Constant", "value"): NameRule.STRING,
    ("Constant", "kind"): NameRule.NOT_A_NAME,
    ("MatchSingleton", "value"): NameRule.NOT_A_NAME,
    ("TypeIgnore", "tag"): NameRule.NOT_A_NAME,
    ("FunctionDef", "type_comment"): NameRule.NOT_A_NAME,
    ("AsyncFunctionDef", "type_comment"): NameRule.NOT_A_NAME,
    ("Assign", "type_comment"): NameRule.NOT_A_NAME,
    ("For", "type_comment"): NameRule.NOT_A_NAME,
    ("AsyncFor", "type_comment"): NameRule.NOT_A_NAME,
    ("With", "type_comment"): NameRule.NOT_A_NAME,
    ("AsyncWith", "type_comment"): NameRule.NOT_A_NAME,
    ("arg", "type_comment"): NameRule.NOT_A_NAME,
}


def names_in(value: object) -> list[str]:
    """The strings a node's field holds: one for ``identifier``/``string`` fields, each for ``identifier*``."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []
