"""The names through which sandboxed code reaches tools: one definition for the sandbox and for the scan.

The sandbox injects a stub module (``sandbox_tools``) whose public functions call the bridge, binds it as
``tools`` in the script's namespace, and keeps the raw bridge entry point under a private name. The static
scan that labels code read-only or state-changing must know exactly these names, and must map a Python
attribute name back to the tool it reaches the same way the stub generator does; when the two disagreed
(the scan looked for another module name), ``from sandbox_tools import kill_task`` was judged read-only.
Both sides therefore import these constants and ``python_names`` from here.

``python_names`` is total and collision-safe: a tool name that is already a plain public identifier is its
own Python name, so ``tools.get_x`` always denotes the tool literally called ``get_x``; other names are
sanitised, and a sanitised name that two tools (or a real tool name) would share is given to none of them
with a digest suffix instead. The mapping depends on the whole set of tool names, so a catalogue that
changed between a review and its run would map some names otherwise: the run's stub is built from the
review's own mapping (``allowed_names``), not recomputed.
"""

from __future__ import annotations

import hashlib
import keyword
import re
from collections.abc import Iterable

STUB_MODULE = "sandbox_tools"
TOOLS_OBJECT = "tools"
BRIDGE_CALL = "_bridge_call"
SCRIPT_EXCEPTIONS = ("ToolError", "ToolDenied")
# Names the stub module or the script's namespace already use; a tool can never take them.
RESERVED_NAMES = frozenset({TOOLS_OBJECT, *SCRIPT_EXCEPTIONS, "Any"})

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")  # fullmatch: "$" would also match before a final newline
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_DIGEST_LENGTH = 8


def is_plain_name(name: str) -> bool:
    """A public identifier the stub can use as is (not private, not a keyword, not reserved)."""
    return bool(_IDENTIFIER.fullmatch(name)) and not keyword.iskeyword(name) and name not in RESERVED_NAMES


def _sanitised(name: str) -> str:
    text = _UNSAFE.sub("_", name).lstrip("_") or "tool"
    if text[0].isdigit():
        text = f"tool_{text}"
    if keyword.iskeyword(text) or text in RESERVED_NAMES:
        text = f"{text}_"
    return text


def _with_digest(name: str) -> str:
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_LENGTH]
    return f"{_sanitised(name)}_{digest}"


def python_names(tool_names: Iterable[str]) -> dict[str, str]:
    """Python attribute name -> real tool name, for every tool that can be given a Python name.

    A tool missing from the result (only possible for adversarial names that collide even with a digest)
    cannot be reached through the stub at all.
    """
    names = sorted(set(tool_names))
    plain = {name for name in names if is_plain_name(name)}
    mapping: dict[str, str] = {name: name for name in plain}
    others = [name for name in names if name not in plain]
    candidates: dict[str, list[str]] = {}
    for name in others:
        candidates.setdefault(_sanitised(name), []).append(name)
    for candidate, owners in sorted(candidates.items()):
        if len(owners) == 1 and candidate not in mapping:
            mapping[candidate] = owners[0]
            continue
        for owner in owners:
            fallback = _with_digest(owner)
            if fallback not in mapping:
                mapping[fallback] = owner
    return mapping


def allowed_names(allow_set: Iterable[str], catalogue: Iterable[str]) -> dict[str, str]:
    """Python name -> tool for the tools of ``allow_set``, as the review maps them over ``catalogue`` (the
    catalogue it judged the code against). A run's stub is built from exactly this: the run's own catalogue can
    differ (another worker's, a server that added or dropped a tool since), and over it a shortened or
    digest-suffixed name can belong to another tool of the allow-set."""
    allowed = set(allow_set)
    return {py: real for py, real in python_names(catalogue).items() if real in allowed}
