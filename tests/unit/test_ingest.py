import json

import pytest

from bamboo.ingest import IncidentRejected, SourceListingError, list_sources, load_incident
from bamboo.models.incident import IncidentSource


def test_jsonl_lines_are_sources_and_blank_lines_skipped(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text('{"incident_id": "a", "email_text": "x"}\n\n{"incident_id": "b", "email_text": "x"}\n')
    sources = list_sources(f)
    assert [s.line for s in sources] == [1, 3]
    assert load_incident(sources[1]).incident_id == "b"


def test_jsonl_sources_carry_byte_offsets_and_read_back(tmp_path):
    f = tmp_path / "b.jsonl"
    lines = [json.dumps({"incident_id": f"i{n}", "email_text": "é" * n + "x"}) for n in range(50)]
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


def test_directory_listing_is_sorted_absolute_and_lists_every_json_entry(tmp_path):
    """A directory or a FIFO named *.json is an item (which fails with its reason when read), not a
    file that silently drops out of the batch."""
    import os

    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "c.json").mkdir()
    os.mkfifo(tmp_path / "d.json")
    (tmp_path / "notes.txt").write_text("x")
    sources = list_sources(tmp_path)
    assert [s.path for s in sources] == [str((tmp_path / n).resolve()) for n in ("a.json", "b.json", "c.json", "d.json")]


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
    f.write_text(json.dumps({"task_data": {"status": "broken"}}))
    assert load_incident(IncidentSource(path=str(f))).incident_id == "named"


# Each of these once passed as an incident, or failed far away from the file (a whole lane, a hung
# workflow, a raw database message). Each is now its own per-item error naming the field.
DEEP = '{"incident_id": "deep", "email_text": "x", "external_data": {"a": ' + "[" * 10_000 + "]" * 10_000 + "}}"


@pytest.mark.parametrize("content,reason", [
    ('{"incident_id": "x", "email_text": "e", "task_data": {"jediTaskID": 9223372036854775808}}',
     "task_data.jediTaskID 9223372036854775808 is out of range"),
    ('{"incident_id": "x", "email_text": "e", "task_data": {"jediTaskID": 1180591620717411303424}}',
     "task_data.jediTaskID 1180591620717411303424 is out of range"),
    ('{"incident_id": "x", "email_text": "e", "task_data": {"jediTaskID": true}}',
     "task_data.jediTaskID must be an integer, got True"),
    ('{"incident_id": "x", "email_text": "e", "task_data": {"jediTaskID": 0}}', "task_data.jediTaskID 0 is out of range"),
    ('{}', "nothing to learn from"),
    ('{"incident_id": "x", "task_data": {}}', "nothing to learn from"),
    ('{"incident_id": "x", "email_text": "a\\u0000b"}', "email_text: the value contains a NUL character"),
    ('{"incident_id": "x", "task_data": {"errorDialog": "ok", "k\\u0000": 1}}', "task_data.k\\x00: the key contains a NUL"),
    ('{"incident_id": "x", "email_text": "\\ud800"}', "email_text: the value contains an unpaired surrogate"),
    (DEEP, "nested far deeper than"),
    ('{"incident_id": "x", "email_text": "e", "external_data": {"a": ' + "[" * 40 + "]" * 40 + "}}",
     "external_data.a[0][0]"),
    ('{"incident_id": "x", "email_text": "e", "task_data": {"ramCount": NaN}}', "NaN is not a JSON number"),
    ('{"incident_id": "first", "incident_id": "second", "email_text": "e"}', "the key 'incident_id' appears twice"),
    ('{"incident_id": "x", "email_text": "e", "task_data": {"status": {"a": 1}}}', "task_data.status must be a string"),
])
def test_bad_values_fail_their_incident_naming_the_field(tmp_path, content, reason):
    f = tmp_path / "i.json"
    f.write_text(content)
    with pytest.raises(IncidentRejected) as caught:
        load_incident(IncidentSource(path=str(f)))
    assert reason in str(caught.value)


def test_a_bad_line_in_the_middle_of_a_jsonl_fails_alone(tmp_path):
    f = tmp_path / "b.jsonl"
    good = json.dumps({"incident_id": "g", "email_text": "resolved", "task_data": {"jediTaskID": 7, "status": "done"}})
    f.write_text("\n".join([good, "{}", '{"incident_id": "t", "email_text": "e"} trailing', good.replace('"g"', '"h"')]) + "\n")
    sources = list_sources(f)
    assert [s.line for s in sources] == [1, 2, 3, 4]
    assert load_incident(sources[0]).incident_id == "g" and load_incident(sources[3]).incident_id == "h"
    with pytest.raises(IncidentRejected, match="nothing to learn from"):
        load_incident(sources[1])
    with pytest.raises(IncidentRejected, match="invalid JSON"):
        load_incident(sources[2])


def test_a_fifo_is_refused_without_blocking(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes: the listing and the reader refuse it."""
    import os

    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SourceListingError, match="not a regular file"):
        list_sources(fifo)
    lone = tmp_path / "in.json"
    os.mkfifo(lone)
    with pytest.raises(SourceListingError, match="not a regular file"):
        list_sources(lone)
    # Listed as a file, then swapped for a FIFO before the worker reads it.
    with pytest.raises(IncidentRejected, match="is a FIFO"):
        load_incident(IncidentSource(path=str(lone)))
    with pytest.raises(IncidentRejected, match="is a FIFO"):
        load_incident(IncidentSource(path=str(fifo), line=1, offset=0))


GOOD = json.dumps({"incident_id": "good", "email_text": "resolved", "task_data": {"jediTaskID": 7, "status": "done"}})


def test_what_is_not_a_regular_file_in_the_batch_fails_with_its_kind(tmp_path):
    """Issue 28, finding 8: each of these was skipped unseen (FIFO, directory) or followed (a link out of
    the batch: the worker, as root, read /etc/shadow through one). Nothing here is ever opened."""
    import os

    batch = tmp_path / "batch"
    batch.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.json").write_text(GOOD)
    (batch / "dir.json").mkdir()
    os.mkfifo(batch / "fifo.json")
    (batch / "out.json").symlink_to(elsewhere / "secret.json")
    (batch / "up.json").symlink_to("../elsewhere/secret.json")
    (batch / "dev.json").symlink_to("/dev/zero")
    (batch / "loop.json").symlink_to("loop.json")
    expected = {
        "dir.json": "is a directory", "fifo.json": "is a FIFO", "out.json": "symbolic link to a file outside",
        "up.json": "symbolic link to a file outside", "dev.json": "symbolic link to a file outside",
        "loop.json": "loops back on itself",
    }
    sources = {s.path.rsplit("/", 1)[-1]: s for s in list_sources(batch)}
    assert set(sources) == set(expected)
    for name, reason in expected.items():
        with pytest.raises(IncidentRejected, match=reason):
            load_incident(sources[name])


def test_a_device_in_the_batch_is_refused_unopened(tmp_path):
    import os
    import stat

    try:
        os.mknod(tmp_path / "dev.json", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    with pytest.raises(IncidentRejected, match="is a character device"):
        load_incident(list_sources(tmp_path)[0])


def test_a_link_within_the_batch_directory_is_followed(tmp_path):
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "real.data").write_text(GOOD)
    (tmp_path / "linked.json").symlink_to("kept/real.data")
    [source] = list_sources(tmp_path)
    assert load_incident(source).incident_id == "good"


@pytest.mark.parametrize("status,reason", [
    ("x" * 400, "task_data.status is 400 characters long, over the 64-character limit"),
    ("broken | exhausted", "task_data.status 'broken | exhausted' is not a task status"),
    ("9lives", "is not a task status"),
])
def test_a_status_is_bounded_where_the_incident_enters(tmp_path, status, reason):
    """Issue 28, finding 3: a status of a few hundred characters became a clue node over the store's
    300-character names, refused far away, and retried for an hour."""
    f = tmp_path / "i.json"
    f.write_text(json.dumps({"incident_id": "s", "email_text": "e", "task_data": {"jediTaskID": 7, "status": status}}))
    with pytest.raises(IncidentRejected) as caught:
        load_incident(IncidentSource(path=str(f)))
    assert reason in str(caught.value)


def test_routing_never_builds_a_node_the_graph_model_refuses():
    from bamboo.extraction.panda.routing import route_task_data

    clues = route_task_data({"status": "y" * 5000, "site": "s" * 5000, "ramCount": "r" * 5000,
                             "task_creation_arguments": "t" * 5000 + " --x"}, b"k")
    names = [n.name for n in clues.symptoms + clues.features + clues.context_features + clues.components]
    assert names and all(len(n) <= 300 for n in names)
    assert not any(n.startswith("TaskStatus") for n in names)
    assert any(s.startswith("status: is 5000 characters long") for s in clues.skipped)
    assert all(len(s) < 400 for s in clues.skipped)
