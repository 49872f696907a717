"""The errorDialog classifier: rule order, HTML handling, pilot codes and the deterministic fallback."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bamboo.extraction.panda.error_classes import (
    PILOT_ERROR_CATEGORIES,
    ErrorClass,
    classify_error_dialog,
    known_categories,
    strip_html,
)
from bamboo.extraction.panda.routing import route_task_data

CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*$")


@pytest.mark.parametrize(
    ("dialog", "category", "code"),
    [
        ("pilot:1212 Payload ran out of memory", "InsufficientMemory", 1212),
        ("Pilot error code: 1213 Reached batch system time limit", "WalltimeExceeded", 1213),
        ("pilotErrorCode=1099 Failed to stage-in file", "StageInFailure", 1099),
        ("pilot:1324 Service not available at the moment", "ServiceUnavailable", 1324),
        ("pilot:1305 Failed to execute payload", "PayloadExecutionFailure", 1305),
        ("pilot:1150 Looping job killed by pilot", "LoopingJob", 1150),
        ("No candidate sites: 0 candidates remained after memory check ramCount=64000", "BrokerageNoSite", None),
        ("too many input files per job: nFilesPerJob=500 exceeds the limit of 200", "TooManyFilesPerJob", None),
        ("authentication failure: user proxy has expired", "AuthenticationExpired", None),
        ("stage-out failed: quota exceeded for rse SCRATCHDISK", "StageOutFailure", None),
        ("Error in TFile::Init: file AOD.1._000001.pool.root.1 is truncated", "InputFileCorrupted", None),
        ("missing input: dataset has no replicas", "InputFileLost", None),
        ("OSError: [Errno 28] No space left on device", "DiskSpaceExceeded", None),
        ("digitisation killed: exceeded memory limit of 8000 MB", "InsufficientMemory", None),
        ("jobs at X exceeded walltime", "WalltimeExceeded", None),
        (" *** Break *** segmentation violation", "PayloadSegfault", None),
        ("apptainer: failed to mount image /cvmfs/unpacked.cern.ch/x:1", "ContainerFailure", None),
        ("asetup failed: release Athena,25.0.3 not found on cvmfs", "SoftwareReleaseMissing", None),
        ("jobs stuck: site PIC_UCORE in scheduled downtime", "SiteUnavailable", None),
        ("payload failed: AttributeError: 'NoneType' object has no attribute 'Get'", "PayloadException", None),
    ],
)
def test_rules_classify_representative_dialogs(dialog: str, category: str, code: int | None) -> None:
    result = classify_error_dialog(dialog)
    assert result.category == category, result
    assert result.pilot_error_code == code


def test_html_links_are_stripped_before_matching() -> None:
    dialog = ('<a href="https://bigpanda.cern.ch/job?pandaid=6512408811">6512408811</a> '
              "pilot:1212 Payload ran out of memory &amp; was killed")
    result = classify_error_dialog(dialog)
    assert result.category == "InsufficientMemory"
    assert "<a" not in result.plain_text and "href" not in result.plain_text
    assert result.plain_text == "6512408811 pilot:1212 Payload ran out of memory & was killed"


def test_reason_token_wins_over_pilot_code_and_phrases() -> None:
    result = classify_error_dialog("pilot:1212 Payload ran out of memory reason=TooManyFiles")
    assert result.category == "TooManyFilesPerJob"
    assert result.matched_rule == "reason:TooManyFiles"
    assert result.pilot_error_code == 1212


def test_unknown_reason_token_is_kept_verbatim() -> None:
    result = classify_error_dialog("task broken, reason=scout_failure_threshold")
    assert result.category == "ScoutFailureThreshold"
    assert result.matched_rule.startswith("reason:")


def test_specific_pilot_code_wins_over_misleading_prose() -> None:
    result = classify_error_dialog("pilot:1137 Failed to stage-out file; payload memory was fine")
    assert result.category == "StageOutFailure"
    assert result.matched_rule == "pilot:1137"


def test_generic_pilot_code_yields_to_specific_prose() -> None:
    result = classify_error_dialog("pilot:1305 Failed to execute payload: Segmentation fault in libFoo.so")
    assert result.category == "PayloadSegfault"
    assert result.matched_rule == "phrase:segfault"
    assert result.pilot_error_code == 1305


def test_brokerage_text_mentioning_memory_is_brokerage_not_oom() -> None:
    assert classify_error_dialog("0 candidates after brokerage: insufficient memory at all sites").category == "BrokerageNoSite"


def test_numbers_in_task_parameters_are_not_pilot_codes() -> None:
    result = classify_error_dialog("ramCount=1212 coreCount=1305 something odd happened")
    assert result.pilot_error_code is None
    assert result.category == "UnclassifiedRamcountCorecountSomething"


def test_unknown_pilot_code_is_recorded_and_falls_through() -> None:
    result = classify_error_dialog("pilot:1999 No space left on device")
    assert result.pilot_error_code == 1999
    assert result.category == "DiskSpaceExceeded"


def test_fallback_is_deterministic_and_camel_case() -> None:
    text = "The quantum flux capacitor overheated on node wn-042"
    first = classify_error_dialog(text)
    assert first == classify_error_dialog(text)
    assert first.category == "UnclassifiedQuantumFluxCapacitor"
    assert first.matched_rule == "fallback"
    assert first.confidence < 0.5


def test_a_dialog_of_one_long_token_names_a_symptom_a_graph_can_hold() -> None:
    # The task table's errordialog holds 510 characters: one path or encoded blob, or a reason token that long,
    # made a category longer than a graph node's name may be, and routing the task raised.
    for dialog in ("x" * 510, "failed: " + "Ab" * 255, "reason=" + "Q" * 500):
        category = classify_error_dialog(dialog).category
        assert len(category) <= 100 and category == classify_error_dialog(dialog).category
        route_task_data({"errorDialog": dialog, "status": "failed"}, b"k")


def test_empty_dialog_has_a_stable_category() -> None:
    assert classify_error_dialog("").category == "UnclassifiedEmpty"
    assert classify_error_dialog("<br/>  ").category == "UnclassifiedEmpty"


def test_confidence_reflects_how_explicit_the_evidence_was() -> None:
    reason = classify_error_dialog("reason=InsufficientMemory").confidence
    code = classify_error_dialog("pilot:1212 x").confidence
    phrase = classify_error_dialog("out of memory").confidence
    fallback = classify_error_dialog("zzz unknown words").confidence
    assert reason > code > phrase > fallback


def test_every_pilot_code_maps_to_a_known_camel_case_category() -> None:
    categories = known_categories()
    for code, entry in PILOT_ERROR_CATEGORIES.items():
        assert 1000 <= code <= 1999
        assert CAMEL.match(entry.category)
        assert entry.category in categories


def test_the_documented_categories_exist() -> None:
    expected = {"InsufficientMemory", "WalltimeExceeded", "InputFileLost", "BrokerageNoSite", "StageOutFailure",
                "SoftwareReleaseMissing", "PayloadSegfault", "AuthenticationExpired", "DiskSpaceExceeded",
                "TooManyFilesPerJob", "SiteUnavailable"}
    assert expected <= known_categories()


def test_result_is_immutable() -> None:
    result = classify_error_dialog("pilot:1212 x")
    assert isinstance(result, ErrorClass)
    with pytest.raises(Exception):
        result.category = "Other"  # type: ignore[misc]


def test_strip_html_collapses_whitespace_and_entities() -> None:
    assert strip_html("<b>a</b>\n\n<i>b&nbsp;c</i>") == "a b c"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
@example("A'A")  # an apostrophe inside a word once leaked into the category
@example("the job's payload didn't fit")
def test_any_text_yields_a_camel_case_category_deterministically(text: str) -> None:
    first = classify_error_dialog(text)
    assert CAMEL.match(first.category), first.category
    assert first == classify_error_dialog(text)


@pytest.mark.parametrize("dialog", ["failed at stage-out: Output file too large", "failed: Output file too large",
                                    "Output files were too big for the job's disk"])
def test_one_failure_is_one_symptom_whatever_the_stage_wording(dialog: str) -> None:
    # the dialog's wording once split one failure across StageOutFailure and DiskSpaceExceeded
    assert classify_error_dialog(dialog).category == "DiskSpaceExceeded"


@pytest.mark.parametrize("dialog", ["pilot:1360 Image not found", "Image not found",
                                    "failed: no such image docker://atlas/athena:24"])
def test_a_missing_container_image_is_a_container_failure_with_or_without_its_code(dialog: str) -> None:
    assert classify_error_dialog(dialog).category == "ContainerFailure"
