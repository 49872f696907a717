"""The facts of a pending review as every front end lists them, and the names of the answers.

The workflow computes the facts (``PendingView``: hazards, state-changing lines, opaque reasons, procedure
bodies and diffs); this module only words them, the same way the terminal does, so a reviewer reads the
same warnings in the console, in Mattermost and in ``bamboo investigate``.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel

from bamboo.investigation.contract import PendingView, TranscriptEntry
from policy.decisions import DecisionKind
from policy.review_facts import ProcedureView

CHOICE_KEYS: dict[DecisionKind, str] = {
    DecisionKind.RUN_ONCE: "y", DecisionKind.AUTO_RUN: "a", DecisionKind.ALWAYS_ASK: "k",
    DecisionKind.EDIT: "e", DecisionKind.REJECT: "N",
}
CHOICE_WORDS: dict[DecisionKind, str] = {
    DecisionKind.RUN_ONCE: "approve once", DecisionKind.AUTO_RUN: "auto-run", DecisionKind.ALWAYS_ASK: "always ask",
    DecisionKind.EDIT: "edit", DecisionKind.REJECT: "reject",
}


class Effect(BaseModel):
    """What running the code does, in one phrase, and whether it changes state."""

    state_changing: bool
    text: str


def effect(view: PendingView) -> Effect:
    if view.read_only:
        return Effect(state_changing=False, text="read-only")
    if view.opaque_reasons:
        return Effect(state_changing=True,
                      text="STATE-CHANGING: cannot be analysed, so it may call any bridged tool once approved")
    return Effect(state_changing=True, text=f"STATE-CHANGING ({', '.join(view.state_changing)})")


def flagged_lines(view: PendingView) -> set[int]:
    """Line numbers (1-based) that call a state-changing tool or procedure."""
    return {line for lines in view.state_changing_lines.values() for line in lines}


def notes(view: PendingView) -> list[str]:
    """Everything a reader of the code could miss, in the terminal's words."""
    found = []
    for tool, lines in sorted(view.state_changing_lines.items()):
        found.append(f"state-changing: {tool} on line {', '.join(str(n) for n in lines)}")
    for reason in view.opaque_reasons:
        found.append(f"cannot be analysed: {reason}")
    found += [f"look closely: {hazard.detail}" for hazard in view.hazards]
    return found


def procedure_notes(procedure: ProcedureView) -> list[str]:
    found = [f"look closely: {hazard.detail}" for hazard in procedure.hazards]
    if procedure.granted_to:
        found.append(f"auto-run granted by {procedure.granted_to}"
                     + (" for an earlier version: it changed since" if procedure.changed_since_grant else ""))
    return found


def procedure_effect(procedure: ProcedureView) -> str:
    return "read-only" if procedure.read_only else f"STATE-CHANGING ({', '.join(procedure.state_changing)})"


def edit_diff(view: PendingView, transcript: list[TranscriptEntry]) -> str:
    """What changed since the code this turn was last shown with (an edit sent it back for review): a
    unified diff of the two exact texts from the session's transcript, or "" for a turn's first code."""
    earlier = [e for e in transcript if e.kind == "code" and e.turn == view.turn
               and e.data.get("code_hash") not in (None, view.code_hash)]
    if not earlier:
        return ""
    before = earlier[-1]
    return "".join(difflib.unified_diff(
        before.text.splitlines(keepends=True), view.code.splitlines(keepends=True),
        fromfile=f"turn {view.turn} as reviewed before ({before.data['code_hash'][:12]})",
        tofile=f"turn {view.turn} now ({view.code_hash[:12]})"))
