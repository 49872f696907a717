"""Every kind of bad input fails its own item with a reason that says what is wrong; the batch completes."""

from __future__ import annotations

import asyncio
import json
import shutil


from bamboo.accumulation.contract import PopulateProgress, PopulateResult
from tests.conftest import EXAMPLES
from tests.integration.helpers import populate


async def test_bad_inputs_fail_alone_with_clear_reasons(client, running_worker, services, tmp_path):
    good = sorted(EXAMPLES.glob("*.json"))[:3]
    for f in good:
        shutil.copy(f, tmp_path / f.name)
    base = json.loads(good[0].read_text())
    (tmp_path / "x_missing.json").write_text(json.dumps(base))
    (tmp_path / "x_invalid.json").write_text('{"incident_id": "broken", "task_data": {')
    wrong = dict(base, incident_id="wrong-types", task_data={**base["task_data"], "jediTaskID": "forty"})
    (tmp_path / "x_wrong_types.json").write_text(json.dumps(wrong))
    huge = dict(base, incident_id="huge", email_text="x" * (5 * 1024 * 1024))
    (tmp_path / "x_huge_email.json").write_text(json.dumps(huge))
    (tmp_path / "x_latin1.json").write_bytes(json.dumps(dict(base, incident_id="latin")).replace("reco", "r\u00e9co").encode("latin-1"))

    handle = await populate(client, tmp_path, paused=True, wait=False)
    for _ in range(100):  # wait for the listing, then make one listed file disappear
        p = await handle.query("progress", result_type=PopulateProgress)
        if p.total:
            break
        await asyncio.sleep(0.1)
    assert p.total == 8
    (tmp_path / "x_missing.json").unlink()
    await handle.signal("resume")
    result: PopulateResult = await handle.result()

    assert result.done == 3 and result.failed == 5
    reasons = {f.source.rsplit("/", 1)[-1]: f.reason for f in result.failures}
    assert "file not found" in reasons["x_missing.json"]
    assert "invalid JSON at line 1" in reasons["x_invalid.json"]
    assert "jediTaskID must be an integer" in reasons["x_wrong_types.json"]
    assert "email_text is 5.2 MB, over the 1 MiB limit" in reasons["x_huge_email.json"]
    assert "not valid UTF-8" in reasons["x_latin1.json"] and "re-encode" in reasons["x_latin1.json"]
    assert (await services.store.knowledge.row_counts())["graphs"] == 3


def _incident(base: dict, incident_id: str, **task) -> dict:
    return dict(base, incident_id=incident_id, task_data={**base["task_data"], **task})


async def test_hostile_inputs_fail_alone_and_the_slices_go_on(client, running_worker, services, llm_server, tmp_path):
    """Each of these used to hang a workflow, fail a whole slice (its incidents re-run one by one, with a
    raw Postgres message), or pass as an incident. Each is now its own failure naming its file and
    field; the good incidents are learned once, in their slice."""
    good = sorted(EXAMPLES.glob("*.json"))[:3]
    for f in good:
        shutil.copy(f, tmp_path / f.name)
    base = json.loads(good[0].read_text())
    bad = {
        "x_2pow63.json": (_incident(base, "big", jediTaskID=2**63), "task_data.jediTaskID 9223372036854775808 is out of range"),
        "x_2pow70.json": (_incident(base, "huge", jediTaskID=2**70), "task_data.jediTaskID 1180591620717411303424 is out of range"),
        "x_negative.json": (_incident(base, "neg", jediTaskID=-3), "task_data.jediTaskID -3 is out of range"),
        "x_true.json": (_incident(base, "bool", jediTaskID=True), "task_data.jediTaskID must be an integer"),
        "x_nul.json": (dict(base, incident_id="nul", email_text="before\u0000after"), "email_text: the value contains a NUL"),
        "x_empty.json": ({}, "nothing to learn from"),
    }
    for name, (doc, _) in bad.items():
        (tmp_path / name).write_text(json.dumps(doc))
    (tmp_path / "x_deep.json").write_text(
        '{"incident_id": "deep", "email_text": "x", "external_data": {"a": ' + "[" * 10_000 + "]" * 10_000 + "}}")
    # Same task and status as the first good file: a second incident for the same graph.
    (tmp_path / "x_duplicate.json").write_text(json.dumps(dict(base, incident_id="again")))

    handle = await populate(client, tmp_path, wait=False)
    result: PopulateResult = await asyncio.wait_for(handle.result(), 120)

    reasons = {f.source.rsplit("/", 1)[-1]: f.reason for f in result.failures}
    for name, (_, reason) in bad.items():
        assert name in reasons[name] and reason in reasons[name], (name, reasons.get(name))
    assert "nested" in reasons["x_deep.json"]
    duplicate = reasons.get("x_duplicate.json") or reasons.get(good[0].name)
    assert duplicate and "duplicate incident" in duplicate and "already stored from" in duplicate, reasons
    assert (result.done, result.failed) == (3, len(bad) + 2), reasons
    assert result.escalated == 0, "no slice failed: nothing was re-run on its own"
    assert all(n <= 4 for n in llm_server.counts_by_schema().values()), llm_server.counts_by_schema()
    assert (await services.store.knowledge.row_counts())["graphs"] == 3
    for reason in reasons.values():
        assert "psycopg" not in reason and "Traceback" not in reason


async def test_a_bad_line_in_the_middle_of_a_jsonl_fails_alone(client, running_worker, services, tmp_path):
    docs = [json.loads(p.read_text()) for p in sorted(EXAMPLES.glob("*.json"))[:3]]
    lines = [json.dumps(docs[0]), "{}", json.dumps(docs[1])[:-5], json.dumps(docs[2])]
    (tmp_path / "batch.jsonl").write_text("\n".join(lines) + "\n")
    result: PopulateResult = await asyncio.wait_for(populate(client, tmp_path / "batch.jsonl"), 120)
    reasons = {f.source.rsplit("/", 1)[-1]: f.reason for f in result.failures}
    assert (result.done, result.failed) == (2, 2), reasons
    assert "nothing to learn from" in reasons["batch.jsonl:2"] and "batch.jsonl:2" in reasons["batch.jsonl:2"]
    assert "invalid JSON" in reasons["batch.jsonl:3"]


async def test_a_status_no_node_can_hold_fails_its_item_instead_of_hanging_the_batch(client, running_worker, services,
                                                                                     llm_server, tmp_path):
    """Issue 28, finding 3: routing built `TaskStatus<status>` over the store's 300-character names; the
    pydantic error was no rejection, so the escalated incident's load was retried for an hour and the
    batch never finished. The status is bounded where the incident enters, so it fails alone, at once."""
    good = sorted(EXAMPLES.glob("*.json"))[:2]
    for f in good:
        shutil.copy(f, tmp_path / f.name)
    base = json.loads(good[0].read_text())
    (tmp_path / "x_long_status.json").write_text(json.dumps(_incident(base, "long-status", jediTaskID=4242,
                                                                      status="Broken" * 60)))
    (tmp_path / "x_piped_status.json").write_text(json.dumps(_incident(base, "piped", jediTaskID=4243,
                                                                       status="running|failed")))
    result: PopulateResult = await asyncio.wait_for(populate(client, tmp_path), 90)
    reasons = {f.source.rsplit("/", 1)[-1]: f.reason for f in result.failures}
    assert (result.done, result.failed, result.escalated) == (2, 2, 0), reasons
    assert "task_data.status is 360 characters long, over the 64-character limit" in reasons["x_long_status.json"]
    assert "'running|failed' is not a task status" in reasons["x_piped_status.json"]


async def test_what_is_not_a_file_of_the_batch_fails_its_item_with_the_reason(client, running_worker, services,
                                                                               llm_server, tmp_path):
    """Issue 28, finding 8: a FIFO or a directory named *.json vanished from the batch with no item and no
    error, and a symbolic link out of the batch directory was followed (as root, to /etc/shadow)."""
    import os

    batch = tmp_path / "batch"
    batch.mkdir()
    good = sorted(EXAMPLES.glob("*.json"))[:2]
    for f in good:
        shutil.copy(f, batch / f.name)
    outside = tmp_path / "outside"
    outside.mkdir()
    base = json.loads(good[0].read_text())
    (outside / "valid.json").write_text(json.dumps(_incident(base, "outside", jediTaskID=777, status="broken")))
    os.mkfifo(batch / "x_fifo.json")
    (batch / "x_dir.json").mkdir()
    (batch / "x_link_out.json").symlink_to(outside / "valid.json")
    (batch / "x_link_etc.json").symlink_to("/etc/passwd")

    result: PopulateResult = await asyncio.wait_for(populate(client, batch), 90)
    reasons = {f.source.rsplit("/", 1)[-1]: f.reason for f in result.failures}
    assert (result.total, result.done, result.failed) == (6, 2, 4), reasons
    assert "is a FIFO" in reasons["x_fifo.json"]
    assert "is a directory" in reasons["x_dir.json"]
    for link in ("x_link_out.json", "x_link_etc.json"):
        assert "symbolic link to a file outside its directory" in reasons[link], reasons[link]
    assert (await services.store.knowledge.row_counts())["graphs"] == 2
