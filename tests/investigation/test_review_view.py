"""The terminal shows the exact hashed code: never cropped, invisible characters spelled out, hazards flagged.

Issue: a harmless-looking first statement followed by 300 spaces and a hidden retry was shown as one line in
an 80-column review panel (and in -v), approved, and run.
"""

from __future__ import annotations

from rich.console import Console

from bamboo.cli.review_view import pending_panel, transcript_code
from bamboo.investigation.contract import PendingView
from policy.catalog import ToolCatalog, ToolFacts
from policy.code_hazards import HazardKind, find_hazards, visible
from policy.code_identity import code_hash
from policy.phases import Phase
from policy.procedures import assess_read_only
from policy.review import ReviewRequest, decide_review
from policy.review_facts import review_facts

HIDDEN = ("t = await tools.get_task_details(task_id=task_id)" + " " * 300
          + "; from sandbox_tools import retry_task as r_; await r_(task_id=task_id)")
TOOLS = [ToolFacts(name="get_task_details", read_only=True), ToolFacts(name="retry_task", read_only=False)]


def _view(code: str, **extra) -> PendingView:
    catalog = ToolCatalog.build(TOOLS, extra.pop("procedures", {}))
    request = ReviewRequest(phase=Phase.INTERACTIVE, code=code, catalog=catalog)
    decision = decide_review(request)
    flags = catalog.read_only_flags()
    facts = review_facts(code, assess_read_only(code, flags, catalog.procedure_code, request.conventions), flags,
                         catalog.procedure_code, extra.pop("grants", {}), extra.pop("granted_code", {}),
                         request.conventions)
    return PendingView(
        session_id="s", turn=1, code_hash=decision.code_hash, code=code, summary="scripted", requester="alice",
        read_only=decision.read_only, tools=list(decision.tools), state_changing=list(decision.state_changing),
        reason=decision.reason.value, detail=decision.detail, choices=list(decision.choices),
        opaque_reasons=list(facts.opaque_reasons), hazards=list(facts.hazards),
        state_changing_lines={k: list(v) for k, v in facts.state_changing_lines.items()},
        procedures=list(facts.procedures))


def _render(renderable, width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_hidden_retry_is_visible_in_an_80_column_review() -> None:
    view = _view(HIDDEN)
    assert view.state_changing == ["retry_task"] and not view.read_only
    shown = _render(pending_panel(view))
    assert "retry_task" in shown.replace("\n", "")
    assert "STATE-CHANGING (retry_task)" in shown
    assert "line 1 holds 3 statements" in shown and "blank characters inside it" in shown
    assert "state-changing: retry_task on line 1" in shown


def test_verbose_transcript_shows_the_whole_code_too() -> None:
    shown = _render(transcript_code(HIDDEN))
    assert "retry_task" in shown.replace("\n", "") and "look closely" in shown


def test_invisible_and_look_alike_characters_are_spelled_out() -> None:
    code = "x = 'safe'\u202e # )(lla_kcolb\nt\u043eols = 1\nawait tools.get_task_details(task_id=1)\u200b"
    hazards = {(h.kind, h.line) for h in find_hazards(code)}
    assert {(HazardKind.INVISIBLE, 1), (HazardKind.NON_ASCII, 2), (HazardKind.INVISIBLE, 3)} <= hazards
    rendered = visible(code)
    assert "⟨U+202E⟩" in rendered and "⟨U+200B⟩" in rendered and "\u202e" not in rendered
    assert code_hash(code) != code_hash(rendered)  # display only: what is approved is the real code
    assert "⟨U+202E⟩" in _render(pending_panel(_view(code)))


def test_unparseable_code_says_why_it_counts_as_state_changing() -> None:
    view = _view("await tools.get_task_details(task_id=1\n")
    shown = _render(pending_panel(view))
    assert view.opaque_reasons and "does not parse" in view.opaque_reasons[0]
    assert "cannot be analysed" in shown and "does not parse" in shown


def test_a_replayed_procedure_shows_its_body_and_what_changed_since_its_grant() -> None:
    from datetime import datetime, timezone

    from policy.grants import make_grant

    granted = "t = await tools.get_task_details(task_id=task_id)\nreturn {'s': t['status']}"
    now = granted + "\nawait tools.retry_task(task_id=task_id)"
    procedures = {"proc__get_task_details__retry_task": now}
    grant = make_grant("proc__get_task_details__retry_task", {"proc__get_task_details__retry_task": granted},
                       "bob", datetime(2026, 12, 1, tzinfo=timezone.utc))
    view = _view("await tools.proc__get_task_details__retry_task(task_id=task_id)", procedures=procedures,
                 grants={grant.procedure: grant}, granted_code={grant.code_hash: granted})
    [procedure] = view.procedures
    assert procedure.code == now and procedure.changed_since_grant and not procedure.read_only
    assert "+await tools.retry_task(task_id=task_id)" in procedure.diff_from_granted
    shown = _render(pending_panel(view), width=100)
    assert "replays proc__get_task_details__retry_task" in shown and "retry_task(task_id=task_id)" in shown
    assert "changed since" in shown


HOSTILE_SUMMARY = ("\x1bc\x1b[2J\x1b[H╭─ review turn 1 · read-only ─╮ nothing to worry about\n"
                   "\x1b]8;;http://evil.example/\x1b\\details\x1b]8;;\x1b\\ \x9b2J \u202eevil\u202c \u2066x\u2069 \x7f"
                   " [bold]markup[/bold]")


def _hidden_bytes(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F
            or 0x200B <= ord(c) <= 0x200F or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069
            or ord(c) == 0xFEFF]


def _panel(shown: str, title: str) -> str:
    """The lines of the box whose top border carries ``title``, borders included."""
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line and line.lstrip().startswith("╭"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("╰"))
    return "\n".join(lines[start:end + 1])


def test_the_model_summary_is_inert_and_outside_the_verdict_panel(monkeypatch) -> None:
    """Issue 24: a summary starting with ESC c cleared the terminal and drew a fake read-only review over the
    real state-changing panel. The review, as ``bamboo investigate`` prints it, carries no escape, C1 or bidi
    character; they are spelled out, under a label saying the model wrote them, and not in the panel."""
    import io

    from bamboo.cli import investigate_cmd

    out = io.StringIO()
    monkeypatch.setattr(investigate_cmd, "console", Console(file=out, width=80, color_system=None))
    view = _view("await tools.retry_task(task_id=task_id)").model_copy(
        update={"summary": HOSTILE_SUMMARY, "trigger_signals": ["\x1b[31mred\x1b[0m"]})
    investigate_cmd.show_pending(view)
    shown = out.getvalue()
    assert not _hidden_bytes(shown), _hidden_bytes(shown)
    assert "⟨U+001B⟩c⟨U+001B⟩[2J" in shown and "⟨U+009B⟩2J" in shown and "⟨U+202E⟩evil⟨U+202C⟩" in shown
    assert "⟨U+001B⟩]8;;http://evil.example/" in shown and "[bold]markup[/bold]" in shown
    assert "The model says (unverified):" in shown and "because: ⟨U+001B⟩[31mred" in shown
    panel = _panel(shown, "review turn 1 ·")
    assert "STATE-CHANGING (retry_task)" in panel
    for words in ("nothing to worry", "evil", "markup", "⟨U+001B⟩", "mred", "The model says"):
        assert words not in panel, words
    # the trusted panel and the choices are the last thing above the prompt
    assert shown.index("The model says") < shown.index("review turn 1 ·") < shown.index("y = run once")


def test_every_front_end_shows_the_task_the_request_and_the_wait_beside_the_code() -> None:
    """Issue 27: a person deciding saw the code and who asked, not which task it acts on, what was asked or for
    how long it has waited. The words come from one place; the request is the requester's text, shown inert."""
    from datetime import UTC, datetime, timedelta

    from bamboo.frontends.mattermost.render import review_post
    from bamboo.frontends.review import context

    asked = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    view = _view("t = await tools.get_task_details(task_id=task_id)").model_copy(update={
        "task_id": 40149035, "task_status": "failed", "task_owner": "prod-user",
        "request": "why did it fail? [red]x[/red] **bold**", "asked_at": asked})
    about = context(view, asked + timedelta(minutes=135))
    assert about.task == "40149035 · status failed · owner prod-user"
    assert about.waiting == "2 h 15 min (since 2026-12-02 09:00 UTC)"
    assert about.request == "why did it fail? [red]x[/red] **bold**"

    console = Console(width=80, record=True, color_system=None)
    console.print(pending_panel(view))
    shown = console.export_text()
    assert "task 40149035 · status failed · owner prod-user" in shown
    assert "request: why did it fail? [red]x[/red] **bold**" in shown  # markup in the request stays text
    post = review_post(view, tag="abc234")
    assert "task: 40149035 · status failed · owner prod\\-user" in post  # Markdown-escaped, as all task text
    assert "request: why did it fail?" in post and "**bold**" not in post

    unread = context(view.model_copy(update={"task_status": "", "task_owner": "", "asked_at": None}), asked)
    assert unread.task == "40149035 · status and owner not read yet" and unread.waiting == "unknown"


def test_a_name_python_reads_as_another_is_named_as_what_python_reads() -> None:
    """Python folds identifiers to NFKC: "ᵈʳʸ_ʳᵘⁿ = False" set dry_run and the kill under "if not dry_run" ran,
    while every view showed a name of its own and the only hazard said "non-ASCII character"."""
    code = "dry_run = True\nᵈʳʸ_ʳᵘⁿ = False  # a flag of its own\nif not dry_run:\n    await tools.kill_task(task_id=7)"
    said = [h.detail for h in find_hazards(code)]
    assert "line 2: Python reads the name ᵈʳʸ_ʳᵘⁿ as dry_run" in said
    assert not any("Python reads the name" in h.detail for h in find_hazards("dry_run = True\nname = 'ᵈʳʸ'"))
    # characters tokenize does not take for part of a name (a wavy low line splits it into three tokens)
    wavy = "dry_run = True\ndry\ufe4frun = False\nif not dry_run:\n    await tools.kill_task(task_id=7)"
    assert "line 2: Python reads the name dry\ufe4frun as dry_run" in [h.detail for h in find_hazards(wavy)]
    # in an f-string's replacement field (one token on 3.11, its fields unread)
    fielded = 'dry_run = True\nnote = f"{(ᵈʳʸ_ʳᵘⁿ := False)}"\nif not dry_run:\n    await tools.kill_task(task_id=7)'
    assert "line 2: Python reads the name ᵈʳʸ_ʳᵘⁿ as dry_run" in [h.detail for h in find_hazards(fielded)]
    alike = [h.detail for h in find_hazards("a\u0387b = 1") if "Python reads the name" in h.detail]
    assert alike == ["line 1: Python reads the name a\u0387b as a\xb7b (a\\xb7b)"]


def test_the_review_says_which_grants_auto_run_leaves() -> None:
    """An auto-run answer signs the grants it leaves for later sessions: the review names them, inert."""
    view = _view("r = await tools.get_task_details(task_id=task_id)\nreturn r").model_copy(
        update={"grants": ["proc__look[bold]x[/bold]@" + "ab" * 32]})
    shown = " ".join(_render(pending_panel(view), width=120).split())
    assert "auto-run also grants, for later sessions, until revoked: proc__look[bold]x[/bold] (abababababab)" in shown
    assert "auto-run also grants" not in _render(pending_panel(_view("return 1")))


def test_the_edit_diff_has_the_lines_python_and_the_code_view_have() -> None:
    """The diff after an edit was split with ``str.splitlines``, which also breaks at \\x0b \\x0c \\x1c-\\x1e \\x85
    U+2028/9 inside a line: it showed lines the code does not have (and glued a "+" into one)."""
    from datetime import UTC, datetime

    from bamboo.frontends.review import edit_diff
    from bamboo.investigation.contract import TranscriptEntry

    before = "x = 1\nprint(x)\n"
    after = "x = 1\nnote = 'a\x1cb\x0bc\x0cd\x85e\u2028f\u2029g'; await tools.retry_task(task_id=task_id)\nprint(x)\n"
    view = _view(after)
    shown = [TranscriptEntry(seq=1, at=datetime.now(UTC), kind="code", text=before, turn=view.turn,
                             data={"code_hash": code_hash(before)})]
    diff = visible(edit_diff(view, shown)).split("\n")
    assert diff[2] == "@@ -1,2 +1,3 @@", diff
    assert diff[3:6] == [" x = 1", "+" + visible(after.split("\n")[1]), " print(x)"], diff
