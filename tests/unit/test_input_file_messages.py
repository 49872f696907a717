"""Two common input-file mistakes get a message an operator can act on: a UTF-8 byte-order
mark, and a JSONL line cut short, whose position must not contradict the reader's `file:N` label."""

from __future__ import annotations

import codecs
import json

import pytest

from bamboo.analysis.task_files import TaskFileError, read_task_file
from bamboo.ingest import IncidentRejected, list_sources, load_incident
from bamboo.input_files import InputRejected, parse_json

INCIDENT = {"task_data": {"jediTaskID": 5, "status": "broken", "errorDialog": "pilot:1305 Failed ü"}, "email_text": "Grüße"}


def _rejected(raw: bytes) -> str:
    with pytest.raises(InputRejected) as caught:
        parse_json(raw)
    return str(caught.value)


def test_a_byte_order_mark_is_named_with_what_to_do():
    why = _rejected(codecs.BOM_UTF8 + json.dumps(INCIDENT).encode())
    assert why == ("starts with a UTF-8 byte-order mark (BOM), which JSON does not allow; save the file as UTF-8 "
                   "without BOM")


def test_a_byte_order_mark_in_an_incident_and_a_task_file(tmp_path):
    incident = tmp_path / "bom.json"
    incident.write_bytes(codecs.BOM_UTF8 + json.dumps(INCIDENT, ensure_ascii=False).encode())
    with pytest.raises(IncidentRejected, match="byte-order mark .*save the file as UTF-8 without BOM"):
        load_incident(list_sources(tmp_path)[0])
    with pytest.raises(TaskFileError, match="bom.json: starts with a UTF-8 byte-order mark"):
        read_task_file(incident)


def test_a_jsonl_line_is_placed_by_its_column_not_by_a_line_number(tmp_path):
    text = json.dumps(INCIDENT, ensure_ascii=False)
    f = tmp_path / "trunc.jsonl"
    f.write_bytes((text + "\n" + text[:40] + "\n" + text.replace(": 5", ": x", 1) + "\r\n").encode())
    sources = list_sources(f)
    assert load_incident(sources[0]).graph_id() == "panda:5:broken"
    reasons = []
    for source in sources[1:]:
        with pytest.raises(IncidentRejected) as caught:
            load_incident(source)
        reasons.append(str(caught.value))
    assert reasons == [
        "invalid JSON at the end of this line (column 41), which ends too early: Expecting ':' delimiter",
        f"invalid JSON at column {text.index(': 5') + 3} of this line: Expecting value",
    ]


def test_the_last_jsonl_line_without_a_final_break_is_placed_by_its_column(tmp_path):
    text = json.dumps(INCIDENT, ensure_ascii=False)
    f = tmp_path / "last.jsonl"
    f.write_bytes((text + "\n" + text[:40]).encode())
    with pytest.raises(IncidentRejected) as caught:
        load_incident(list_sources(f)[1])
    assert str(caught.value) == "invalid JSON at the end of this line (column 41), which ends too early: Expecting ':' delimiter"


def test_a_document_of_several_lines_keeps_line_and_column():
    assert _rejected(b'{\n  "a": x\n}\n') == "invalid JSON at line 2 column 8: Expecting value"
    assert _rejected(b'{"incident_id": "x"') == "invalid JSON at line 1 column 20: Expecting ',' delimiter"
