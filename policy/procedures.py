"""Procedures: stored, reviewed code reused as a tool, named by its signature, judged by its content.

Read-only-ness is always recomputed here from code: the direct code's signature, then, for every procedure
it reaches, that procedure's current stored code, recursively. No stored ``read_only`` flag of a procedure
is ever consulted, so a procedure whose code changed to call a state-changing tool loses its read-only
standing at once. Tools the caller's mapping does not mention count as NOT read-only.

Like the signature it builds on, this is advisory (it decides what to expose, what to pre-screen, and when
a prompt can be skipped); the sandbox bridge's allow-set is what enforces.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict

from policy.signature import DEFAULT_CONVENTIONS, CodeSignature, ScanConventions, scan_code

PROCEDURE_PREFIX = "proc__"
MAX_PROCEDURE_NAME_LENGTH = 60
MIN_EXPOSED_PROCEDURE_TOOLS = 2
_NAME_HASH_LENGTH = 8
_UNSAFE_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_]")


# How a run pins a procedure that had no stored code when it was reviewed: no body's hash, so none replays.
ABSENT_PROCEDURE = "absent"


def is_procedure_name(name: str) -> bool:
    return name.startswith(PROCEDURE_PREFIX)


def procedure_name(tools: Iterable[str]) -> str:
    """``proc__`` plus the sorted tool names joined by ``__``.

    Names are sanitised to ``[A-Za-z0-9_]`` so they are valid tool and Python identifiers. When the name
    would exceed ``MAX_PROCEDURE_NAME_LENGTH``, or sanitising changed any character (so two different tool
    sets could collide), it is cut and suffixed with the first 8 hex digits of the SHA-256 of the exact
    sorted names, which keeps it stable and distinct.
    """
    names = sorted(set(tools))
    if not names:
        raise ValueError("a procedure is named by the tools it calls, and this code calls none")
    exact = "__".join(names)
    safe = _UNSAFE_NAME_CHARACTERS.sub("_", exact)
    full = PROCEDURE_PREFIX + safe
    if safe == exact and len(full) <= MAX_PROCEDURE_NAME_LENGTH:
        return full
    digest = hashlib.sha256(exact.encode("utf-8", "surrogatepass")).hexdigest()[:_NAME_HASH_LENGTH]
    keep = MAX_PROCEDURE_NAME_LENGTH - len("__") - _NAME_HASH_LENGTH
    return f"{full[:keep].rstrip('_')}__{digest}"


class ReadOnlyAssessment(BaseModel):
    """The recomputed verdict for one block of code, with the evidence behind it.

    ``procedures`` are the procedures reached (directly or nested) that have stored code;
    ``missing_procedures`` are ``proc__`` names reached without stored code (they count as state-changing);
    ``raw_tools`` are the non-procedure tools reached; ``state_changing`` lists every reached name that is
    not read-only.
    """

    model_config = ConfigDict(frozen=True)

    read_only: bool
    signature: CodeSignature
    procedures: tuple[str, ...] = ()
    missing_procedures: tuple[str, ...] = ()
    raw_tools: tuple[str, ...] = ()
    state_changing: tuple[str, ...] = ()
    opaque_reasons: tuple[str, ...] = ()

    @property
    def opaque(self) -> bool:
        return bool(self.opaque_reasons)

    @property
    def all_procedures(self) -> tuple[str, ...]:
        return tuple(sorted({*self.procedures, *self.missing_procedures}))


def assess_read_only(
    code: str,
    read_only_flags: Mapping[str, bool],
    procedure_code: Mapping[str, str],
    conventions: ScanConventions = DEFAULT_CONVENTIONS,
) -> ReadOnlyAssessment:
    """Recompute whether ``code`` only reads, following procedure tools through their stored code.

    ``read_only_flags`` maps raw tool names to their declared flag (absent = not read-only).
    ``procedure_code`` maps procedure tool names to their current stored code; a name found there is
    always judged by that code, never by a flag. A ``proc__`` name with no stored code, opaque code
    anywhere along the way, or a procedure that reaches itself makes the whole block not read-only.
    """
    walk = _ProcedureWalk(procedure_code, conventions)
    signature = walk.visit_code(code, via=None)
    state_changing = {tool for tool in walk.raw_tools if not read_only_flags.get(tool, False)}
    state_changing |= walk.missing_procedures
    return ReadOnlyAssessment(
        read_only=not state_changing and not walk.reasons,
        signature=signature,
        procedures=tuple(sorted(walk.procedures)),
        missing_procedures=tuple(sorted(walk.missing_procedures)),
        raw_tools=tuple(sorted(walk.raw_tools)),
        state_changing=tuple(sorted(state_changing)),
        opaque_reasons=tuple(sorted(walk.reasons)),
    )


def reached_procedures(
    code: str, procedure_code: Mapping[str, str], conventions: ScanConventions = DEFAULT_CONVENTIONS
) -> tuple[str, ...]:
    """Every procedure ``code`` reaches, directly or through other procedures' stored code (sorted)."""
    walk = _ProcedureWalk(procedure_code, conventions)
    walk.visit_code(code, via=None)
    return tuple(sorted(walk.procedures | walk.missing_procedures))


def procedure_scope(
    codes: Iterable[str], names: Iterable[str], procedure_code: Mapping[str, str], catalogue: Iterable[str] = ()
) -> dict[str, str]:
    """The stored bodies a decision about ``codes`` and the procedures ``names`` can read: every procedure they
    reach, directly or through other bodies, with the Python names of the tools in ``catalogue`` and with the
    default ones (the review scans with the first, session approvals and pins with the second: a body reached
    either way is in scope). A decision handed only these bodies judges as with the whole store, except that a
    procedure outside them counts as one without stored code: never read-only, and pinned as absent."""
    ways = (ScanConventions.for_tools(catalogue), DEFAULT_CONVENTIONS)
    scope: dict[str, str] = {}
    pending = list(codes)
    for name in names:
        if is_procedure_name(name) and name in procedure_code and name not in scope:
            scope[name] = procedure_code[name]
            pending.append(scope[name])
    while pending:
        text = pending.pop()
        for way in ways:
            for tool in scan_code(text, way).tools:
                if is_procedure_name(tool) and tool in procedure_code and tool not in scope:
                    scope[tool] = procedure_code[tool]
                    pending.append(scope[tool])
    return dict(sorted(scope.items()))


def is_exposable_procedure(
    name: str,
    read_only_flags: Mapping[str, bool],
    procedure_code: Mapping[str, str],
    allow_mutating_autorun: bool = False,
    conventions: ScanConventions = DEFAULT_CONVENTIONS,
) -> bool:
    """Whether a stored procedure may be offered to the planner as a callable tool.

    It must have stored code that the scan can read, call at least two tools (a single-tool procedure adds
    nothing over the raw tool), and be read-only as recomputed now, unless the deployment opted in to
    mutating auto-run, which only the interactive loop honours.
    """
    if name not in procedure_code:
        return False
    return is_exposable(assess_read_only(procedure_code[name], read_only_flags, procedure_code, conventions),
                        allow_mutating_autorun)


def is_exposable(verdict: ReadOnlyAssessment, allow_mutating_autorun: bool = False) -> bool:
    """``is_exposable_procedure``'s rule on a procedure's assessment already made (a caller judging a whole store
    walks each body once)."""
    if verdict.opaque or len(verdict.signature.tools) < MIN_EXPOSED_PROCEDURE_TOOLS:
        return False
    return verdict.read_only or allow_mutating_autorun


class _ProcedureWalk:
    """Depth-first walk through procedure code, collecting every tool reached and every reason to distrust it."""

    def __init__(self, procedure_code: Mapping[str, str], conventions: ScanConventions) -> None:
        self.procedure_code = procedure_code
        self.conventions = conventions
        self.procedures: set[str] = set()
        self.missing_procedures: set[str] = set()
        self.raw_tools: set[str] = set()
        self.reasons: set[str] = set()
        self._finished: set[str] = set()
        self._stack: list[str] = []

    def visit_code(self, code: str, via: str | None) -> CodeSignature:
        signature = scan_code(code, self.conventions)
        prefix = f"in {via}: " if via else ""
        self.reasons.update(prefix + reason for reason in signature.opaque_reasons)
        for tool in signature.tools:
            # Only a proc__ name is a procedure: a stored row named after a raw tool (kill_task, written by anyone
            # with the store's role) judged that tool by its harmless body, while the call went to the real tool.
            if is_procedure_name(tool) and tool in self.procedure_code:
                self._visit_procedure(tool)
            elif is_procedure_name(tool):
                self.missing_procedures.add(tool)
            else:
                self.raw_tools.add(tool)
        return signature

    def _visit_procedure(self, name: str) -> None:
        if name in self._stack:
            cycle = " -> ".join([*self._stack[self._stack.index(name):], name])
            self.reasons.add(f"procedure cycle {cycle}")
            return
        self.procedures.add(name)
        if name in self._finished:
            return
        self._stack.append(name)
        self.visit_code(self.procedure_code[name], via=name)
        self._stack.pop()
        self._finished.add(name)
