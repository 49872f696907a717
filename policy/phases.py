"""Phases and the allow-set each implies: the set of tool names the sandbox bridge will dispatch.

The allow-set is the enforcement boundary (checked on the resolved tool name at call time, so aliasing
cannot slip past it). What the prompt happened to list never widens or narrows it.

- ``automatic``: no operator is watching, so exactly the tools that only read: raw tools declared
  read-only, and procedure tools whose stored code recomputes as read-only. Tools that need a human
  (``requires_interaction``) are never bridged.
- ``interactive`` after a human approved the code: exactly the tools that code was shown to reach (the
  scan's signature), so what the reviewer was told the code calls bounds what it can call, whatever route
  the code takes at run time; for code the scan cannot read (shown to the reviewer as opaque, with the
  reasons) every bridged tool except human-input ones.
- a durably auto-run turn: only the granted procedure tools, so code nobody looked at this time can do
  nothing but replay procedures somebody did approve.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from policy.catalog import ToolCatalog
from policy.procedures import assess_read_only
from policy.signature import DEFAULT_CONVENTIONS, CodeSignature, ScanConventions


class Phase(str, Enum):
    AUTOMATIC = "automatic"
    INTERACTIVE = "interactive"


def automatic_allow_set(
    catalog: ToolCatalog, conventions: ScanConventions = DEFAULT_CONVENTIONS
) -> frozenset[str]:
    """Tools an unattended run may call: the read-only ones, procedures judged by their current code."""
    flags = catalog.read_only_flags()
    allowed: set[str] = set()
    for tool in catalog.tools:
        if tool.requires_interaction:
            continue
        if tool.origin == "procedure":
            code = catalog.procedure_code.get(tool.name)
            if code is not None and assess_read_only(code, flags, catalog.procedure_code, conventions).read_only:
                allowed.add(tool.name)
        elif tool.read_only:
            allowed.add(tool.name)
    return frozenset(allowed)


def interactive_allow_set(catalog: ToolCatalog) -> frozenset[str]:
    """Every bridged tool except those that need a human in the loop: the most an approved run may reach."""
    return frozenset(tool.name for tool in catalog.tools if not tool.requires_interaction)


def approved_allow_set(signature: CodeSignature, catalog: ToolCatalog) -> frozenset[str]:
    """Tools human-approved code may call: the ones its review showed, or (opaque code) any bridged tool.

    Binding the allow-set to the signature makes the scan's reading authoritative at run time: code that
    reaches a tool by a route the scan did not see (``os.sys.modules[...]``, a name built at run time)
    finds that tool refused by the bridge instead of running under a review that never mentioned it.
    """
    bridged = interactive_allow_set(catalog)
    if signature.opaque:
        return bridged
    return frozenset(signature.tools) & bridged


def granted_allow_set(procedures: Iterable[str]) -> frozenset[str]:
    """Tools a durably auto-run turn may call: the granted procedures and nothing else."""
    return frozenset(procedures)


def allow_set_for_phase(
    phase: Phase, catalog: ToolCatalog, conventions: ScanConventions = DEFAULT_CONVENTIONS
) -> frozenset[str]:
    """The allow-set for code a run in ``phase`` may execute (after human approval, when interactive)."""
    if phase is Phase.AUTOMATIC:
        return automatic_allow_set(catalog, conventions)
    return interactive_allow_set(catalog)


def replay_allow_set(
    procedure: str,
    phase: Phase,
    catalog: ToolCatalog,
    conventions: ScanConventions = DEFAULT_CONVENTIONS,
) -> frozenset[str]:
    """Tools a replayed procedure's stored code may call: those its code reaches, within the phase's set.

    A replay runs code that was reviewed when it was captured, so it needs nothing beyond what that code
    references (directly or through nested procedures); intersecting with the phase's allow-set keeps the
    read-only boundary of an automatic phase intact through any depth of procedures. Opaque or missing
    code gets an empty set.
    """
    code = catalog.procedure_code.get(procedure)
    if code is None:
        return frozenset()
    verdict = assess_read_only(code, catalog.read_only_flags(), catalog.procedure_code, conventions)
    if verdict.opaque:
        return frozenset()
    reached = set(verdict.raw_tools) | set(verdict.procedures)
    return frozenset(reached) & allow_set_for_phase(phase, catalog, conventions)
