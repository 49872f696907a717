"""A procedure's provenance as captures merge into it, and the reviewed code procedures bundled with the examples
(issue 26): every file loads, is named by its signature, calls the real built-in PanDA tools, and names only
example incidents; at least one only reads and one changes state."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bamboo.investigation.bundled import BundledProcedureError, load_bundled
from bamboo.investigation.provenance import Capture, ProcedureProvenance
from bamboo.panda.tools import builtin_tools
from policy.procedures import assess_read_only

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def test_an_incident_counts_once_and_lists_grow_without_repeats():
    record = ProcedureProvenance()
    first = Capture(incident="investigate:s1", triggers=("jobs?",), causes=("Cause A",), reviewed_by=("bob",),
                    ran_at=AT, run_status="ok")
    record = record.merged(first).merged(first)  # a retried finalize adds nothing
    assert record.frequency == 1 and record.incidents == ("investigate:s1",)
    record = record.merged(Capture(incident="investigate:s2", triggers=("jobs?", "status?"),
                                   reviewed_by=("policy:durable_grant", "carol")))
    assert record.frequency == 2 and record.triggers == ("jobs?", "status?")
    assert record.reviewed_by == ("bob", "carol")  # a standing permission is not a reviewer
    assert record.last_run_at == AT and record.last_run_status == "ok"
    replaced = record.replaced("abc")
    assert replaced.versions == 2 and replaced.previous_code_hash == "abc"
    assert ProcedureProvenance.of(replaced.meta()) == replaced


def test_rows_written_before_provenance_read_as_one_capture():
    legacy = {"session": "s0", "summary": "status", "approved_by": "bob", "trigger_signals": ["errorDialog"]}
    record = ProcedureProvenance.of(legacy)
    assert record.frequency == 1 and record.incidents == ("investigate:s0",)
    assert record.triggers == ("errorDialog",) and record.reviewed_by == ("bob",)


def test_the_bundled_procedures_load_and_call_the_real_built_in_tools():
    procedures = load_bundled(ROOT / "examples" / "procedures", ROOT / "examples" / "incidents")
    flags = {tool.spec.name: tool.spec.read_only for tool in builtin_tools()}
    verdicts = {}
    for procedure in procedures:
        verdict = assess_read_only(procedure.code, flags, {})
        assert set(verdict.raw_tools) <= set(flags), procedure.name
        assert procedure.reviewed_by and procedure.incidents and procedure.triggers
        verdicts[procedure.name] = verdict.read_only
    assert verdicts["proc__get_task_details__get_task_jobs_summary"] is True
    assert verdicts["proc__get_task_details__retry_task"] is False


def test_a_bundled_file_named_otherwise_than_its_code_or_naming_an_unknown_incident_is_refused(tmp_path):
    good = json.loads((ROOT / "examples" / "procedures" / "retry_task.json").read_text())
    (tmp_path / "x.json").write_text(json.dumps({**good, "name": "proc__get_task_details"}))
    with pytest.raises(BundledProcedureError, match="x.json: .*tools its code calls name it"):
        load_bundled(tmp_path)
    (tmp_path / "x.json").write_text(json.dumps({**good, "incidents": ["ex-999-made-up"]}))
    with pytest.raises(BundledProcedureError, match="not examples: ex-999-made-up"):
        load_bundled(tmp_path, ROOT / "examples" / "incidents")
