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
``model_says`` shows it apart, labelled as whose words they are (the model's, or a reused procedure's stored
summary) and unverified, indented under that label, and inert (``bamboo.frontends.inert_text``), so it can
neither act on the terminal nor pass for the verdict.

The words (effects, notes, choices, labels) are ``bamboo.frontends.review``'s, shared with the console and the
bot; this module only draws them for a terminal.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from bamboo.frontends.inert_text import inert_markup, inert_rich
from bamboo.frontends.review import (
    MODEL_SAYS, context, effect, grants_line, notes, procedure_effect, procedure_notes, reuse_change, said,
)
from bamboo.investigation.contract import PendingView
from policy.code_hazards import find_hazards, visible
from policy.code_identity import short_hash
from policy.review_facts import ProcedureView


def code_block(code: str, highlight: set[int] | None = None) -> Syntax:
    """Numbered, wrapped code with invisible characters spelled out."""
    return Syntax(visible(code), "python", line_numbers=True, word_wrap=True, highlight_lines=highlight or set(),
                  theme="ansi_dark")


def effect_line(view: PendingView) -> str:
    what = effect(view)
    return f"[{'red' if what.state_changing else 'green'}]{inert_markup(what.text, one_line=True)}[/]"


def pending_panel(view: PendingView) -> RenderableType:
    highlight = {line for lines in view.state_changing_lines.values() for line in lines}
    parts: list[RenderableType] = [code_block(view.code, highlight)]
    found = notes(view)
    if found:
        parts.append(inert_rich("\n".join(found), style="yellow"))  # each note one line (review.notes)
    changed = reuse_change(view)
    if changed is not None and view.reuse is not None:
        parts.append(inert_rich(changed, style="yellow", one_line=True))
        parts.append(Syntax(visible(view.reuse.diff_from_previous), "diff", word_wrap=True, theme="ansi_dark"))
    reused = view.reuse.procedure if view.reuse is not None else None
    for procedure in view.procedures:
        parts.append(procedure_panel(procedure, "reuses" if procedure.name == reused else "replays"))
    granted = grants_line(view)
    if granted is not None:
        parts.append(inert_rich(granted, style="dim", one_line=True))
    if view.review:  # what an answer from another terminal names: this review, not only this code
        parts.append(inert_rich(f"review key {view.review} (elsewhere: bamboo approve {view.session_id} "
                                f"{view.review[:32]} y|a|k|n)", style="dim"))
    about = context(view, datetime.now(UTC))
    parts.insert(0, inert_rich(f"task {about.task}\nrequest: {about.request}\nwaiting {about.waiting}", style="dim"))
    title = f"review turn {view.turn} · {short_hash(view.code_hash)} · {effect_line(view)}"
    subtitle = inert_markup(f"asked by {view.requester} · {view.detail}", one_line=True)
    return Panel(Group(*parts), title=title, subtitle=subtitle, subtitle_align="left")


def procedure_panel(procedure: ProcedureView, verb: str = "replays") -> RenderableType:
    parts: list[RenderableType] = [code_block(procedure.code)]
    found = procedure_notes(procedure)
    if found:
        parts.append(inert_rich("\n".join(found), style="yellow"))  # each note one line (review.notes)
    if procedure.diff_from_granted:
        parts.append(Syntax(visible(procedure.diff_from_granted), "diff", word_wrap=True, theme="ansi_dark"))
    title = inert_markup(f"{verb} {procedure.name} · {short_hash(procedure.code_hash)} · "
                         f"{procedure_effect(procedure)}", one_line=True)
    return Panel(Group(*parts), title=title, border_style="dim")


def transcript_code(code: str) -> RenderableType:
    """Code as the verbose transcript shows it: the same wrapping and spelling as a review, plus hazards."""
    hazards = find_hazards(code)
    if not hazards:
        return code_block(code)
    return Group(code_block(code), Text("\n".join(f"look closely: {h.detail}" for h in hazards), style="yellow"))


__all__ = ["MODEL_SAYS", "code_block", "effect_line", "model_says", "pending_panel", "procedure_panel",
           "review_words", "transcript_code"]


def model_says(summary: str, signals: list[str] | None = None, label: str = MODEL_SAYS) -> RenderableType:
    """Words about code under review that no check vouches for, outside the verdict's panel: a label saying
    whose words they are, then the words, inert and indented under it (a line the model wrote never starts a
    row)."""
    words = summary.strip() or "(nothing)"
    if signals:
        words += "\nbecause: " + "; ".join(signals)
    return Group(Text(label, style="bold yellow"), Padding(inert_rich(words), (0, 0, 0, 4)))


def review_words(view: PendingView) -> RenderableType:
    """The summary of ``view`` under the label ``bamboo.frontends.review.said`` gives it."""
    words = said(view)
    return model_says(words.words, label=words.label)
