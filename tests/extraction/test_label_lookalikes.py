"""A cause label spelled with a look-alike letter ("Wаlltime request too short", a Cyrillic "а") was a second
cause node beside the real one, with its own resolution, and printed the same in every front end. Labels are
folded (NFKC, no format characters) and a word that mixes Latin, Cyrillic or Greek letters is refused: in a
resolution record where the incident enters (one line saying which word), in a model's wording by not using it."""

from __future__ import annotations

import json

import pytest

from bamboo.extraction.labels import normalise_label
from bamboo.extraction.panda.strategy import accept_canonical
from bamboo.ingest import IncidentRejected, parse_incident

REAL = "Walltime request too short"
CYRILLIC = "W\u0430lltime request too short"  # U+0430 CYRILLIC SMALL LETTER A
GREEK = "Walltime request t\u03bfo short"  # U+03BF GREEK SMALL LETTER OMICRON


def _incident(**record) -> bytes:
    base = {"cause": REAL, "resolution": "Increase the walltime and retry", "procedure": ["Check the walltime"]}
    return json.dumps({"task_data": {"jediTaskID": 7, "status": "failed"},
                       "resolution_record": {**base, **record}}).encode()


@pytest.mark.parametrize("spelled", ["Wall\u200btime request too short", "Wall\u00adtime request too short",
                                     "\ufeffWalltime request too short", "\uff37alltime request too short",
                                     "Walltime\u00a0request too short"])
def test_invisible_and_compatibility_characters_fold_into_the_real_label(spelled):
    assert normalise_label(spelled) == REAL


@pytest.mark.parametrize("lookalike", [CYRILLIC, GREEK, "W\u200b\u0430\u200blltime request too short"])
def test_a_word_mixing_scripts_is_no_label(lookalike):
    assert normalise_label(lookalike) == ""


def test_a_models_lookalike_wording_of_a_reviewed_label_is_not_used():
    assert accept_canonical(REAL, CYRILLIC) == REAL


@pytest.mark.parametrize(("field", "value"), [("cause", CYRILLIC), ("resolution", "Incre\u0430se the walltime"),
                                              ("procedure", ["Check the w\u0430lltime"])])
def test_a_resolution_record_with_a_lookalike_is_refused_in_one_line(field, value):
    with pytest.raises(IncidentRejected) as refused:
        parse_incident(_incident(**{field: value}), "poison")
    message = str(refused.value)
    assert f"resolution_record.{field}" in message and "U+0430 CYRILLIC SMALL LETTER A" in message, message
    assert "retype it in one script" in message and "\n" not in message


def test_labels_in_one_script_are_kept_as_they_were():
    assert normalise_label("walltime request too short.") == REAL
    assert normalise_label("Ошибка доступа к хранилищу") == "Ошибка доступа к хранилищу"
    assert normalise_label("Site CERN-PROD: Ошибка") == "Site CERN-PROD: Ошибка", "scripts may differ between words"
    assert parse_incident(_incident(), "ok").resolution_record.cause == REAL
