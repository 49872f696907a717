"""`bamboo analyze-batch --attach ID` with an ID no batch has started a new batch under it (a typo became a batch),
and `--out` was checked only after the analysis ran ("Is a directory", "File exists" when its parent is a file).
Both are refused first, in one line, before anything starts. Temporal is stubbed: what is checked is what the
command asks for and when."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bamboo.analysis.contract import AnalysisResult
from bamboo.cli import analyze_cmd
from bamboo.cli.main import app

TASK = {"jediTaskID": 48981982, "status": "finished", "errorDialog": "pilot:1204 walltime exceeded"}


class Calls:
    def __init__(self) -> None:
        self.connected = 0
        self.analysed = 0
        self.started: list[str] = []
        self.described: list[str] = []


class FakeBatch:
    def __init__(self, calls: Calls, batch_id: str, exists: bool) -> None:
        self.calls, self.batch_id, self.exists = calls, batch_id, exists

    async def status(self) -> str | None:
        self.calls.described.append(self.batch_id)
        return "running" if self.exists else None


@pytest.fixture
def calls(monkeypatch) -> Calls:
    calls = Calls()
    known = {"real-batch"}

    async def client(settings):
        calls.connected += 1
        return object()

    class FakeAnalyses:
        def __init__(self, client) -> None:
            pass

        def batch(self, batch_id: str) -> FakeBatch:
            return FakeBatch(calls, batch_id, batch_id in known)

        async def start_batch(self, inp, *, paused: bool = False):
            calls.started.append(inp.batch_id)

            class Handle:
                id = f"analyze-batch:{inp.batch_id}"
            return Handle()

        async def finished_result(self, wid: str):
            return None

    async def analyze_once(client, task, threshold, deadline_s=None, on_first=None):
        calls.analysed += 1
        return AnalysisResult(task_id=task["jediTaskID"], status=task["status"], root_cause="Walltime request too short",
                              is_novel=False, confidence=0.9, resolution="Increase the walltime", explanation="")

    monkeypatch.setattr(analyze_cmd, "_client", client)
    monkeypatch.setattr(analyze_cmd, "AnalysisClient", FakeAnalyses)
    monkeypatch.setattr(analyze_cmd, "analyze_once", analyze_once)
    return calls


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    d = tmp_path / "tasks"
    d.mkdir()
    (d / "t1.json").write_text(json.dumps(TASK))
    return d


def _error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    return lines[0]


def test_attaching_to_a_batch_that_does_not_exist_starts_nothing(calls, tasks, tmp_path):
    result = CliRunner().invoke(app, ["analyze-batch", str(tasks), "--out", str(tmp_path / "results"),
                                      "--attach", "typo-batch-id", "--detach"])
    assert "no batch typo-batch-id; run without --attach to start one" in _error_line(result)
    assert calls.described == ["typo-batch-id"] and calls.started == []


def test_attaching_to_a_batch_that_exists_follows_it(calls, tasks, tmp_path):
    result = CliRunner().invoke(app, ["analyze-batch", str(tasks), "--out", str(tmp_path / "results"),
                                      "--attach", "real-batch", "--detach"])
    assert result.exit_code == 0, result.output
    assert calls.described == ["real-batch"] and calls.started == ["real-batch"]


def test_a_new_batch_needs_no_description(calls, tasks, tmp_path):
    result = CliRunner().invoke(app, ["analyze-batch", str(tasks), "--out", str(tmp_path / "results"), "--detach"])
    assert result.exit_code == 0, result.output
    assert calls.described == [] and len(calls.started) == 1


@pytest.mark.parametrize(("out", "said"), [
    ("dir", "is a directory; pass a file path for the result"),
    ("afile/t1.json", "afile is not a directory; create the directory first"),
    ("missing/t1.json", "missing does not exist; create the directory first"),
])
def test_analyze_refuses_an_out_it_cannot_write_before_it_starts(calls, tasks, tmp_path, out, said):
    (tmp_path / "dir").mkdir()
    (tmp_path / "afile").write_text("x")
    result = CliRunner().invoke(app, ["analyze", "--task-data", str(tasks / "t1.json"), "--out", str(tmp_path / out)])
    assert said in _error_line(result)
    assert calls.connected == 0 and calls.analysed == 0, "refused before connecting or analysing"


def test_analyze_writes_an_out_in_an_existing_directory(calls, tasks, tmp_path):
    result = CliRunner().invoke(app, ["analyze", "--task-data", str(tasks / "t1.json"), "--out", str(tmp_path / "t1.json")])
    assert result.exit_code == 0, result.output
    assert AnalysisResult.model_validate_json((tmp_path / "t1.json").read_text()).task_id == TASK["jediTaskID"]


@pytest.mark.parametrize(("out", "said"), [
    ("afile", "not a directory; pass a directory for the results"),
    ("afile/results", "afile is not a directory; create the directory first"),
    ("missing/results", "missing does not exist; create the directory first"),
])
def test_analyze_batch_refuses_an_out_it_cannot_write_before_it_starts(calls, tasks, tmp_path, out, said):
    (tmp_path / "afile").write_text("x")
    result = CliRunner().invoke(app, ["analyze-batch", str(tasks), "--out", str(tmp_path / out), "--detach"])
    assert said in _error_line(result)
    assert calls.connected == 0 and calls.started == []


def test_an_out_in_a_directory_that_is_not_writable_is_refused(calls, tasks, tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    # Asked of the system as the command asks it (root may write anywhere, so the answer is the one it would give
    # an operator's account).
    real = os.access
    monkeypatch.setattr(analyze_cmd.os, "access",
                        lambda path, mode: False if Path(path) == locked and mode & os.W_OK else real(path, mode))
    result = CliRunner().invoke(app, ["analyze", "--task-data", str(tasks / "t1.json"), "--out", str(locked / "t1.json")])
    assert "is not writable" in _error_line(result) and calls.analysed == 0
    result = CliRunner().invoke(app, ["analyze-batch", str(tasks), "--out", str(locked), "--detach"])
    assert "is not writable" in _error_line(result) and calls.started == []
