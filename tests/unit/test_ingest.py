import json

import pytest

from bamboo.ingest import IncidentRejected, SourceListingError, list_sources, load_incident
from bamboo.models.accumulate import IncidentSource


def test_jsonl_lines_are_sources_and_blank_lines_skipped(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text('{"incident_id": "a"}\n\n{"incident_id": "b"}\n')
    sources = list_sources(f)
    assert [s.line for s in sources] == [1, 3]
    assert load_incident(sources[1]).incident_id == "b"


def test_jsonl_sources_carry_byte_offsets_and_read_back(tmp_path):
    f = tmp_path / "b.jsonl"
    lines = [json.dumps({"incident_id": f"i{n}", "email_text": "é" * n}) for n in range(50)]
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sources = list_sources(f)
    assert [load_incident(s).incident_id for s in sources] == [f"i{n}" for n in range(50)]
    assert sources[3].offset == sum(len(x.encode()) + 1 for x in lines[:3])  # bytes, not characters
    # A listing made before offsets (line only) still reads, by scanning.
    assert load_incident(IncidentSource(path=str(f), line=7)).incident_id == "i6"


def test_jsonl_line_gone_after_listing_fails_its_item(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text('{"incident_id": "a"}\n{"incident_id": "b"}\n')
    sources = list_sources(f)
    f.write_text('{"incident_id": "a"}\n')
    with pytest.raises(IncidentRejected, match="line 2 no longer exists"):
        load_incident(sources[1])


def test_directory_listing_is_sorted_absolute_and_skips_non_files(tmp_path):
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "c.json").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    sources = list_sources(tmp_path)
    assert [s.path for s in sources] == [str((tmp_path / n).resolve()) for n in ("a.json", "b.json")]


def test_listing_errors_say_what_to_pass(tmp_path):
    with pytest.raises(SourceListingError, match="does not exist"):
        list_sources(tmp_path / "nope")
    with pytest.raises(SourceListingError, match="no .json files"):
        list_sources(tmp_path)


@pytest.mark.parametrize("content,reason", [
    (b"[1, 2]", "top level must be a JSON object"),
    (b'{"incident_id": "x", "surprise": 1}', "surprise: Extra inputs are not permitted"),
    (b'{"incident_id": "x", "task_data": {"jediTaskID": "1"}}', "jediTaskID must be an integer"),
    (b'{"incident_id": "x"', "invalid JSON at line 1"),
    (b'{"incident_id": "\xe9"}', "not valid UTF-8 (byte 0xe9 at offset 17)"),
])
def test_each_bad_file_has_its_own_reason(tmp_path, content, reason):
    f = tmp_path / "i.json"
    f.write_bytes(content)
    with pytest.raises(IncidentRejected, match=reason.replace("(", r"\(").replace(")", r"\)")):
        load_incident(IncidentSource(path=str(f)))


def test_missing_file_and_fallback_id(tmp_path):
    with pytest.raises(IncidentRejected, match="file not found"):
        load_incident(IncidentSource(path=str(tmp_path / "gone.json")))
    f = tmp_path / "named.json"
    f.write_text(json.dumps({"task_data": {}}))
    assert load_incident(IncidentSource(path=str(f))).incident_id == "named"
