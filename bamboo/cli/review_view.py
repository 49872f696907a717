"""How a pending review is shown in a terminal: the exact hashed code, never cropped, with what to look at.

Lines are wrapped (never cut), numbered, and state-changing lines highlighted; invisible or unusual
characters are spelled out as ``⟨U+200B⟩`` (its code point); the review's hazards (long lines, statements pushed out of view,
several statements on a line, non-ASCII letters) are listed under the code; every procedure the code replays
is shown with its body and, when it changed since it was granted, the diff. Code that reuses a stored
procedure says so (which one, the incidents it was captured from, its last run, the values bound into it) and,
when the body changed under its signature, shows the diff from the version before. What is rendered is the code the
workflow hashed and will run; only the spelling of invisible characters differs.

The panel is the trusted verdict: its title, notes and subtitle are built from the workflow's facts. What the
model wrote about the code (its summary and the signals it says it acted on) is never drawn inside it:
``model_says`` shows it apart, labelled as the model's and unverified, indented under that label, and inert
(``bamboo.frontends.inert_text``), so it can neither act on the terminal nor pass for the verdict.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from bamboo.frontends.inert_text import inert_markup, inert_rich
from bamboo.investigation.contract import PendingView
from policy.code_hazards import find_hazards, visible
from policy.code_identity import short_hash
from policy.review_facts import ProcedureView


def code_block(code: str, highlight: set[int] | None = None) -> Syntax:
    """Numbered, wrapped code with invisible characters spelled out."""
    return Syntax(visible(code), "python", line_numbers=True, word_wrap=True, highlight_lines=highlight or set(),
                  theme="ansi_dark")


def effect_line(view: PendingView) -> str:
    if view.read_only:
        return "[green]read-only[/]"
    if view.opaque_reasons:
        return "[red]STATE-CHANGING: cannot be analysed, so it may call any tool once approved[/]"
    return f"[red]STATE-CHANGING ({inert_markup(', '.join(view.state_changing), one_line=True)})[/]"


def pending_panel(view: PendingView) -> RenderableType:
    highlight = {line for lines in view.state_changing_lines.values() for line in lines}
    parts: list[RenderableType] = [code_block(view.code, highlight)]
    notes = _notes(view)
    if notes:
        parts.append(inert_rich("\n".join(notes), style="yellow"))
    if view.reuse is not None and view.reuse.diff_from_previous:
        parts.append(inert_rich(f"{view.reuse.procedure} changed under its signature "
                                f"({view.reuse.versions} versions); the diff from the version before:", style="yellow"))
        parts.append(Syntax(visible(view.reuse.diff_from_previous), "diff", word_wrap=True, theme="ansi_dark"))
    reused = view.reuse.procedure if view.reuse is not None else None
    for procedure in view.procedures:
        parts.append(procedure_panel(procedure, "reuses" if procedure.name == reused else "replays"))
    title = f"review turn {view.turn} · {short_hash(view.code_hash)} · {effect_line(view)}"
    subtitle = inert_markup(f"asked by {view.requester} · {view.detail}", one_line=True)
    return Panel(Group(*parts), title=title, subtitle=subtitle, subtitle_align="left")


def _notes(view: PendingView) -> list[str]:
    notes = [view.reuse.provenance_line()] if view.reuse is not None else []
    for tool, lines in sorted(view.state_changing_lines.items()):
        notes.append(f"state-changing: {tool} on line {', '.join(str(n) for n in lines)}")
    for reason in view.opaque_reasons:
        notes.append(f"cannot be analysed: {reason}")
    notes += [f"look closely: {hazard.detail}" for hazard in view.hazards]
    return notes


def procedure_panel(procedure: ProcedureView, verb: str = "replays") -> RenderableType:
    effect = "read-only" if procedure.read_only else f"STATE-CHANGING ({', '.join(procedure.state_changing)})"
    parts: list[RenderableType] = [code_block(procedure.code)]
    notes = [f"look closely: {hazard.detail}" for hazard in procedure.hazards]
    if procedure.granted_to:
        notes.append(f"auto-run granted by {procedure.granted_to}"
                     + (" for an earlier version: it changed since" if procedure.changed_since_grant else ""))
    if notes:
        parts.append(inert_rich("\n".join(notes), style="yellow"))
    if procedure.diff_from_granted:
        parts.append(Syntax(visible(procedure.diff_from_granted), "diff", word_wrap=True, theme="ansi_dark"))
    title = inert_markup(f"{verb} {procedure.name} · {short_hash(procedure.code_hash)} · {effect}", one_line=True)
    return Panel(Group(*parts), title=title, border_style="dim")


def transcript_code(code: str) -> RenderableType:
    """Code as the verbose transcript shows it: the same wrapping and spelling as a review, plus hazards."""
    hazards = find_hazards(code)
    if not hazards:
        return code_block(code)
    return Group(code_block(code), Text("\n".join(f"look closely: {h.detail}" for h in hazards), style="yellow"))


MODEL_SAYS = "The model says (unverified):"


def model_says(summary: str, signals: list[str] | None = None) -> RenderableType:
    """What the model wrote about code under review, outside the verdict's panel: a label saying whose words
    they are, then the words, inert and indented under it (a line the model wrote never starts a row)."""
    words = summary.strip() or "(nothing)"
    if signals:
        words += "\nbecause: " + "; ".join(signals)
    return Group(Text(MODEL_SAYS, style="bold yellow"), Padding(inert_rich(words), (0, 0, 0, 4)))
