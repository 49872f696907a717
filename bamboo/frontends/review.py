"""The wording of a pending review, for every front end: the facts as lines, the names of the answers, and
whose words the summary is.

The workflow computes the facts (``PendingView``: hazards, state-changing lines, opaque reasons, procedure
bodies and diffs, where a reused procedure came from); this module is the only place that words them, so a
reviewer reads the same warnings and choices in the console, in Mattermost and in ``bamboo investigate``
(the terminal's ``bamboo.cli.review_view`` draws these words, it does not keep its own).

The words returned here are plain text, never markup: some carry what a model, an operator or PanDA wrote
(a summary, a parameter value bound into a reused procedure), so each front end renders them with its own
sanitiser from ``bamboo.frontends.inert_text``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from datetime import datetime, timezone

from pydantic import BaseModel

from bamboo.investigation.contract import PendingView, TranscriptEntry
from policy.decisions import DecisionKind
from policy.review_facts import ProcedureView

# Line breaks as Python, terminals and Markdown see them (and Unicode's, which some renderers draw as breaks); every
# one of them is whitespace to ``\s``. A run of blanks holding one is a break: matched as runs, each run read once
# (``\s*[breaks]+\s*`` tried every start of a run of spaces and scanned the rest: 16,000 spaces in a request took
# 4 s on each render of the approvals page).
_BLANKS = re.compile(r"\s+")
_BREAK = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")

CHOICE_KEYS: dict[DecisionKind, str] = {
    DecisionKind.RUN_ONCE: "y", DecisionKind.AUTO_RUN: "a", DecisionKind.ALWAYS_ASK: "k",
    DecisionKind.EDIT: "e", DecisionKind.REJECT: "N",
}
CHOICE_WORDS: dict[DecisionKind, str] = {
    DecisionKind.RUN_ONCE: "run once", DecisionKind.AUTO_RUN: "auto-run", DecisionKind.ALWAYS_ASK: "always ask",
    DecisionKind.EDIT: "edit", DecisionKind.REJECT: "reject",
}


MODEL_SAYS = "The model says (unverified):"
STORED_SAYS = "The stored procedure's summary, written when it was captured (unverified):"


class Said(BaseModel):
    """Words about the code that no check vouches for, and the label saying whose they are."""

    label: str
    words: str


class Context(BaseModel):
    """What a person deciding needs beside the code: the task it acts on, what was asked, and how long it waits.
    ``request`` is what the requester wrote: front ends render it inert like any untrusted text."""

    task: str
    request: str
    waiting: str


def context(view: PendingView, now: datetime) -> Context:
    """The decision's context in words; ``now`` is the front end's clock, for the waiting time."""
    if view.task_id is None:
        task = "no task: a session without one"
    else:
        known = [f"status {view.task_status}" if view.task_status else "",
                 f"owner {view.task_owner}" if view.task_owner else ""]
        task = f"{view.task_id} · " + (" · ".join(k for k in known if k) or "status and owner not read yet")
    if view.asked_at is None:
        waiting = "unknown"
    else:
        minutes = max(0, int((now - view.asked_at).total_seconds() // 60))
        span = (f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min" if minutes < 2880
                else f"{minutes // 1440} days")
        waiting = f"{span} (since {view.asked_at:%Y-%m-%d %H:%M} UTC)"
    return Context(task=one_line(task), request=one_line(view.request) or "(not recorded)", waiting=waiting)


def one_line(text: str) -> str:
    """``text`` on one line, its breaks spelled ``⏎``: a request (or a task's owner) of several lines drew lines
    that looked exactly like the review's own "tools:" and "policy:" lines, above them."""
    return _BLANKS.sub(lambda run: " ⏎ " if _BREAK.search(run.group()) else run.group(), text.strip())


def because(view: PendingView) -> list[str]:
    """The signals the summary says the code acts on, and for a reused procedure what its trigger matched."""
    signals = list(view.trigger_signals)
    if view.reuse is not None and view.reuse.matched:
        signals.append(f"the request is near what it was captured for: {view.reuse.matched}")
    return signals


def said(view: PendingView) -> Said:
    """The summary shown apart from the verdict: the model's words for new code; for a reused procedure, the
    summary stored with it when it was captured (no model wrote anything this turn), and what it matched."""
    signals = because(view)
    words = view.summary.strip() or "(nothing)"
    if signals:
        words += "\nbecause: " + "; ".join(signals)
    if view.codifies is not None:
        step = view.codifies
        where = f" from {', '.join(step.incidents[:3])}" if step.incidents else ""
        words += f"\nthe written step it codes (stored{where}): {step.description or step.name}"
    return Said(label=STORED_SAYS if view.reuse is not None else MODEL_SAYS, words=words)


def choices_line(view: PendingView, separator: str = "  ") -> str:
    """The answers offered, as ``y = approve once  a = auto-run …``."""
    return separator.join(f"{CHOICE_KEYS[c]} = {CHOICE_WORDS[c]}" for c in view.choices)


def grants_line(view: PendingView) -> str | None:
    """What an auto-run answer signs beside the code: the grants it leaves for later sessions (procedure names
    are stored text: render inert, and on one line, so a name cannot start a line of its own). None when it leaves
    none."""
    said = []
    if view.grants:
        said.append(f"auto-run also grants, for later sessions, until revoked: {_terms(view.grants)}")
    if view.grants_withheld:
        again = max(view.grants_withheld.values()).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        said.append(f"auto-run leaves no grant of {_terms(view.grants_withheld)}: revoked recently, it may be granted "
                    f"again after {again}")
    return one_line("; ".join(said)) if said else None


def _terms(terms: Iterable[str]) -> str:
    return ", ".join(f"{name} ({hash_[:12]})" for name, _, hash_ in (t.rpartition("@") for t in sorted(terms)))


def reuse_change(view: PendingView) -> str | None:
    """The line above the diff when a reused procedure's body changed under its signature; None otherwise. One
    line: the procedure's name is the store's text."""
    if view.reuse is None or not view.reuse.diff_from_previous:
        return None
    return one_line(f"{view.reuse.procedure} changed under its signature ({view.reuse.versions} versions); "
                    "the diff from the version the store records before it (unsigned: the whole code above is what "
                    "runs):")


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
    """Everything a reader of the code could miss: where a reused procedure came from (which one, the incidents
    it was captured from, its last run, the values bound into it), then the code's warnings.

    Each note is one line (``one_line``), in every front end: the provenance joins the store's record (incident ids,
    the last run's status), which whoever can write the procedure rows writes, and a line break in it drew lines
    inside the review that read as the review's own (a forged "dry-run verified" line above the warnings)."""
    found = [view.reuse.provenance_line()] if view.reuse is not None else []
    if view.requester_accepted is False:
        found.append(f"proposed from the store and it changes PanDA: {view.requester} accepts it first (their own run "
                     "answer), then someone else approves it")
    elif view.requester_accepted:
        found.append(f"{view.requester} accepted it for their request; it needs approval by someone else")
    for tool, lines in sorted(view.state_changing_lines.items()):
        found.append(f"state-changing: {tool} on line {', '.join(str(n) for n in lines)}")
    for reason in view.opaque_reasons:
        found.append(f"cannot be analysed: {reason}")
    found += [f"look closely: {hazard.detail}" for hazard in view.hazards]
    return [one_line(note) for note in found]


def procedure_notes(procedure: ProcedureView) -> list[str]:
    """A replayed procedure's warnings and who granted it (the store's text): each on one line, as ``notes``."""
    found = [f"look closely: {hazard.detail}" for hazard in procedure.hazards]
    if procedure.granted_to:
        found.append(f"auto-run granted by {procedure.granted_to}"
                     + (" for an earlier version: it changed since" if procedure.changed_since_grant else ""))
    return [one_line(note) for note in found]


def procedure_effect(procedure: ProcedureView) -> str:
    return "read-only" if procedure.read_only else f"STATE-CHANGING ({', '.join(procedure.state_changing)})"


def _lines(code: str) -> list[str]:
    r"""``code``'s lines as the numbered code view and the hazard checks number them: split at ``\n`` only.
    ``str.splitlines`` also splits at ``\x0b \x0c \x1c-\x1e \x85 U+2028 U+2029``, which Python keeps inside a
    line, so the diff showed lines the code does not have (a lone ``\r`` stays in its line too, spelled out and
    flagged as a control character, as in the code view)."""
    parts = code.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def edit_diff(view: PendingView, transcript: list[TranscriptEntry]) -> str:
    """What changed since the code this turn was last shown with (an edit sent it back for review): a
    unified diff of the two exact texts from the session's transcript, or "" for a turn's first code."""
    earlier = [e for e in transcript if e.kind == "code" and e.turn == view.turn
               and e.data.get("code_hash") not in (None, view.code_hash)]
    if not earlier:
        return ""
    before = earlier[-1]
    return "".join(difflib.unified_diff(
        _lines(before.text), _lines(view.code),
        fromfile=f"turn {view.turn} as reviewed before ({before.data['code_hash'][:12]})",
        tofile=f"turn {view.turn} now ({view.code_hash[:12]})"))
