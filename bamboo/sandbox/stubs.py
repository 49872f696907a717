"""Generate the tool-stub module a sandboxed script imports.

One typed ``async def`` per bridged tool, its docstring rendered from the tool's description and
JSON schema, so generated code can write ``from sandbox_tools import get_task`` or
``await tools.get_task(task_id=1)``. Only bridged tools appear: what is importable is exactly what
is callable. Tool text (names, descriptions, schemas) comes from MCP servers and is untrusted, so it
only ever enters the generated source through ``repr`` literals, never as raw code.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bamboo.tools.model import ToolSpec
from policy.tool_surface import BRIDGE_CALL, STUB_MODULE, python_names

__all__ = ["STUB_MODULE", "generate_stub_module", "python_name", "render_docstring"]

_JSON_TO_PY = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: "$" would also match before a final newline


def python_name(tool_name: str, catalogue: Iterable[str] = ()) -> str | None:
    """The Python name the stub gives ``tool_name`` within ``catalogue`` (``panda.get-task`` ->
    ``panda_get_task``), or None when it cannot be given one; the trust policy's scan uses the same map."""
    mapping = python_names({tool_name, *catalogue})
    return next((py for py, real in mapping.items() if real == tool_name), None)


def _annotation(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "Any"
    kind = schema.get("type")
    if isinstance(kind, list):
        parts = [_JSON_TO_PY.get(k, "Any") for k in kind if isinstance(k, str)]
        return " | ".join(dict.fromkeys(parts)) if parts else "Any"
    return _JSON_TO_PY.get(kind, "Any") if isinstance(kind, str) else "Any"


def _plain(value: Any, limit: int = 200) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_docstring(spec: ToolSpec) -> str:
    lines = [_plain(spec.description, 600) or f"Call the {spec.name!r} tool."]
    lines.append("")
    lines.append("Read-only." if spec.read_only else "Changes state.")
    props = spec.input_schema.get("properties") or {}
    required = set(spec.input_schema.get("required") or [])
    if isinstance(props, dict) and props:
        lines.append("")
        lines.append("Args:")
        for prop, schema in props.items():
            schema = schema if isinstance(schema, dict) else {}
            flag = "required" if prop in required else "optional"
            detail = _plain(schema.get("description", ""))
            extras = []
            if "enum" in schema:
                extras.append("one of " + ", ".join(_plain(v, 40) for v in schema["enum"][:20]))
            if "default" in schema:
                extras.append(f"default {_plain(schema['default'], 40)}")
            tail = f" ({'; '.join(extras)})" if extras else ""
            lines.append(f"    {_plain(prop, 60)} ({_annotation(schema)}, {flag}): {detail}{tail}".rstrip())
    lines.append("")
    lines.append("Raises ToolDenied when the run may not call it, ToolError when the call fails.")
    return "\n".join(lines)


def _signature(spec: ToolSpec) -> tuple[str, str]:
    """(parameter list, body expression building the argument dict)."""
    props = spec.input_schema.get("properties") or {}
    required = spec.input_schema.get("required") or []
    if not isinstance(props, dict) or not all(
        isinstance(p, str) and _IDENT.fullmatch(p) and not keyword.iskeyword(p) and p not in {"_UNSET", BRIDGE_CALL}
        for p in props
    ):
        return "**kwargs: Any", "dict(kwargs)"
    ordered = [p for p in props if p in required] + [p for p in props if p not in required]
    params = []
    for prop in ordered:
        ann = _annotation(props[prop])
        params.append(f"{prop}: {ann}" if prop in required else f"{prop}: {ann} | None = _UNSET")
    if not params:
        return "", "{}"
    names = ", ".join(repr(p) for p in ordered)
    body = f"{{k: v for k, v in zip(({names},), ({', '.join(ordered)},)) if v is not _UNSET}}"
    return ", ".join(params), body


def generate_stub_module(
    specs: Sequence[ToolSpec], catalogue: Iterable[str] | None = None, *, names: Mapping[str, str] | None = None,
) -> tuple[str, dict[str, str]]:
    """Source of the stub module and the mapping python name -> real tool name.

    ``names``: the mapping the run's review used (python name -> real tool), taken as it is: a name the
    review mapped to one tool must not call another here. Without it, Python names are computed over
    ``catalogue`` (every tool the policy could have judged the code against, default: just ``specs``), as the
    policy's scan computes them; but the review's catalogue and the run's can differ (another worker's, a
    server that dropped or added a tool since), and a digest-suffixed or shortened name then moved to another
    tool of the allow-set.
    """
    if names is None:
        names = python_names({s.name for s in specs} | set(catalogue or ()))
    by_real = {real: py for py, real in names.items()}
    stubbed: dict[str, str] = {}
    blocks = [
        '"""Tools bridged into this sandbox run. Every public name here is callable; nothing else is."""',
        "from typing import Any",
        "_UNSET: Any = object()",
    ]
    for spec in sorted(specs, key=lambda s: s.name):
        py = by_real.get(spec.name)
        if py is None or not _IDENT.fullmatch(py) or keyword.iskeyword(py) or py in {"_UNSET", "Any", BRIDGE_CALL}:
            continue  # an adversarial name that collides even with a digest: unreachable, never ambiguous
        stubbed[py] = spec.name
        params, build = _signature(spec)
        ret = "Any"
        blocks.append(
            f"async def {py}({params}) -> {ret}:\n"
            f"    {render_docstring(spec)!r}\n"
            f"    return await {BRIDGE_CALL}({spec.name!r}, {build})"
        )
    public = sorted(stubbed)
    blocks.append(f"__all__ = {public!r}")
    blocks.append(
        "def __getattr__(name: str) -> Any:\n"
        "    raise AttributeError(\n"
        "        f'tool {name!r} is not available in this run; available tools: '\n"
        "        + (', '.join(__all__) or 'none'))"
    )
    blocks.append("def __dir__() -> list:\n    return list(__all__)")
    blocks.append("del Any  # annotations are evaluated already; keep the public surface to the tools")
    return "\n\n".join(blocks) + "\n", stubbed
