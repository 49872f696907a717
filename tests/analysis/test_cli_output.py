"""What `bamboo analyze` prints says who chose the cause, what the confidence measures, and where the
resolution came from."""

from __future__ import annotations

from bamboo.analysis.contract import AnalysisResult, CandidateCause, ModelProposal
from bamboo.cli.analyze_cmd import print_diagnosis
from bamboo.cli.common import console


def result(**fields) -> AnalysisResult:
    top = CandidateCause(name="Expired user proxy", breadth=2, support=1.5, frequency=4, confidence=1.0)
    base = dict(task_id=41000001, status="failed", root_cause="Expired user proxy", is_novel=False, confidence=0.62,
                resolution="Renew the VOMS proxy and retry", explanation="", candidates=[top],
                cause_source="ranking", ranking_confidence=0.62, resolution_source="store",
                resolution_incidents=["incident:a", "incident:b", "incident:c", "incident:d"])
    return AnalysisResult(**{**base, **fields})


def printed(r: AnalysisResult) -> str:
    with console.capture() as capture:
        print_diagnosis(r)
    return " ".join(capture.get().split())


def test_a_refused_proposal_shows_the_rankings_cause_margin_and_why_the_model_was_not_followed():
    out = printed(result(model_proposal=ModelProposal(
        cause="Misconfigured storage token", confidence=0.0, verdict="override_refused",
        verdict_reason="its confidence 0.00 is below the 0.80 an override of the ranking needs")))
    assert "confidence 0.62 (ranking confidence)" in out and "confidence 0.00" not in out.split("Chosen by")[0]
    assert "Chosen by: the ranking; the model proposed Misconfigured storage token at 0.00, not taken because" in out
    assert ("Resolution (stored, from 4 incident(s): incident:a, incident:b, incident:c and 1 more): "
            "Renew the VOMS proxy and retry") in out


def test_an_accepted_override_shows_the_models_reason_and_the_rankings_margin():
    out = printed(result(
        root_cause="Misconfigured storage token", confidence=0.9, cause_source="model_override",
        override_reason="site=MWT2_UCORE points at the token", resolution="Fix the storage token",
        resolution_incidents=["incident:e"],
        model_proposal=ModelProposal(cause="Misconfigured storage token", confidence=0.9,
                                     verdict="override_accepted")))
    assert "confidence 0.90 (model override; ranking confidence 0.62)" in out
    assert ("Chosen by: the model, overriding the ranking's Expired user proxy (ranking confidence 0.62): "
            "site=MWT2_UCORE points at the token") in out
    assert "Resolution (stored, from 1 incident(s): incident:e): Fix the storage token" in out


def test_a_cause_without_a_stored_resolution_says_so_instead_of_inventing_one():
    out = printed(result(resolution="", resolution_incidents=[], resolution_source="none",
                         model_proposal=ModelProposal(cause="Expired user proxy", confidence=0.4, verdict="agreed")))
    assert "Resolution: none stored for this cause" in out and "the model agreed" in out


def test_the_models_words_are_printed_inert():
    """Issue 24: the cause, explanation and e-mail draft are the model's words and were printed as rich markup
    with their control characters intact."""
    hostile = "\x1bc\x1b]8;;http://evil\x1b\\x\x9b2J\u202eevil [link=http://evil]click[/link]"
    out = printed(result(root_cause=hostile, explanation=hostile, suggestions=[hostile], email_subject="s",
                         email_content=hostile))
    assert "\x1b" not in out and "\x9b" not in out and "\u202e" not in out
    assert out.count("⟨U+001B⟩c⟨U+001B⟩]8;;http://evil") == 4 and out.count("[link=http://evil]click[/link]") == 4


def test_an_operators_correction_is_shown_as_the_operators_decision_with_the_rankings_margin_beside_it():
    """Issue 30: after a correction the CLI printed "confidence 1.00 (ranking margin)" and "Chosen by: the ranking;
    the model agreed" while the result said the operator decided and the ranking's margin was 0.63."""
    out = printed(result(confidence=1.0, cause_source="operator", operator_verdict="corrected", ranking_confidence=0.63,
                         model_proposal=ModelProposal(cause="Expired user proxy", confidence=0.7, verdict="agreed"),
                         notes=["an operator corrected this task to Expired user proxy"]))
    assert "confidence 1.00 (operator's verdict on this task; ranking confidence 0.63)" in out
    assert ("Chosen by: an operator, who corrected this task's analysis to Expired user proxy; the model agreed"
            in out)
    assert "(ranking margin)" not in out and "Chosen by: the ranking" not in out and "operator confirmed" not in out


def test_the_first_answer_says_the_models_opinion_is_pending_and_a_slow_model_is_said_to_be_skipped():
    first = printed(result(answer="first", model_status="pending", model_deadline_s=120))
    assert "first answer, from the ranking alone" in first
    assert "Chosen by: the ranking; the model's second opinion is pending (at most 120 s per step)" in first
    slow = printed(result(model_status="too_slow", model_deadline_s=120))
    assert "the model was skipped: it did not answer within the 120 s deadline" in slow


def test_the_bot_posts_the_same_reading_of_who_decided():
    """The bot printed the confidence with the diagnosis source ("llm") and never said who decided."""
    from bamboo.frontends.mattermost.bot import analysis_post

    post = analysis_post(result(confidence=1.0, cause_source="operator", operator_verdict="corrected",
                                ranking_confidence=0.63,
                                model_proposal=ModelProposal(cause="Expired user proxy", confidence=0.7,
                                                             verdict="agreed"))).replace("\\", "")
    assert "confidence 1.00 (operator's verdict on this task; ranking confidence 0.63)" in post
    assert "Chosen by: an operator, who corrected this task's analysis to Expired user proxy; the model agreed" in post
    hostile = analysis_post(result(root_cause="@channel [x](http://evil)", cause_source="model_override",
                                   override_reason="**bold** @all"))
    assert "@channel" not in hostile and "@all" not in hostile and "[x](http" not in hostile


def test_no_line_the_model_or_the_task_wrote_passes_for_one_of_the_systems_lines():
    """An explanation (the model's, or an errorDialog it repeated) with line breaks printed lines of its own
    that read exactly like the system's: 'Chosen by: an operator' and a 'Resolution (stored, ...)' no incident
    recorded. Each such text stays on its line; the draft is indented under its label."""
    forged = "\nChosen by: an operator (confidence 1.00)\nResolution (stored, from 1 incident(s): x): kill the task"
    r = result(explanation="Proxy expired." + forged, supporting_evidence=["clue" + forged], notes=["n" + forged],
               suggestions=["s" + forged], email_subject="Task" + forged, email_content="Dear owner," + forged)
    with console.capture() as capture:
        print_diagnosis(r)
    lines = capture.get().splitlines()
    assert not any(line.startswith(("Chosen by: an operator", "Resolution (stored, from 1 incident(s): x)"))
                   for line in lines), lines


FORGING_REASON = ("clue err_x points at cause_b\nResolution (stored, from 3 incident(s): INC-1, INC-2, INC-3): kill "
                  "task 42 and resubmit with --force\nChosen by: an operator, who confirmed cause_b for this task "
                  ":white_check_mark:")


def test_the_models_override_reason_cannot_add_lines_to_the_cli_or_the_bot_post(monkeypatch):
    """The reason follows "Chosen by:" (an override's reason, up to 600 characters the model wrote): its line
    breaks printed a stored resolution and an operator's confirmation that do not exist, in `bamboo analyze` and
    in the bot's post. Every field those lines carry stays on its line, breaks written ⏎."""
    from bamboo.frontends.mattermost.bot import analysis_post

    r = result(root_cause="Misconfigured storage token", confidence=0.9, cause_source="model_override",
               override_reason=FORGING_REASON, resolution="Fix the token\nChosen by: an operator",
               suggestions=["s\nResolution (stored): kill it"],
               model_proposal=ModelProposal(cause="Misconfigured storage token", confidence=0.9,
                                            reason=FORGING_REASON, verdict="override_accepted"))
    monkeypatch.setattr(console, "width", 400)  # lines as printed, not as wrapped at 80 columns
    with console.capture() as capture:
        print_diagnosis(r)
    cli = capture.get().splitlines()
    post = analysis_post(r).replace("\\", "").split("\n")
    for lines in (cli, post):
        assert [line for line in lines if line.startswith("Chosen by:")] == [
            next(line for line in lines if line.startswith("Chosen by: the model, overriding"))], lines
        assert [line for line in lines if line.startswith("Resolution")] == [
            next(line for line in lines if line.startswith("Resolution") and "Fix the token⏎Chosen by" in line)], lines
    assert sum("⏎Resolution (stored, from 3 incident(s)" in line for line in cli + post) == 2


def test_an_emoji_code_the_model_wrote_prints_as_written():
    """rich turns ":white_check_mark:" into ✅ in any string a Console prints unless told not to: the model's
    reason drew a confirmation mark beside a forged operator's line."""
    from bamboo.cli.common import err_console

    out = printed(result(root_cause=":white_check_mark: Expired user proxy", cause_source="model_override",
                         override_reason="clue x confirmed :white_check_mark:"))
    assert "✅" not in out and out.count(":white_check_mark:") == 2
    with err_console.capture() as capture:
        err_console.print(":warning: from the model")
    assert capture.get().strip() == ":warning: from the model"
