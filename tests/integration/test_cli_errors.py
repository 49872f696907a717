"""Every error the CLI meets is one line that says what was wrong and what to do; the traceback only
with `bamboo --debug`. These commands used to print tracebacks (or hang)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.services import ROOT, worker_env


def _bamboo(settings, *args, extra_env=None, timeout=60) -> subprocess.CompletedProcess:
    env = {**worker_env(settings), "COLUMNS": "300", **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "bamboo.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_attaching_to_a_batch_that_does_not_exist(settings):
    line = _one_line_error(_bamboo(settings, "populate", "--attach", "nosuch"))
    assert "no batch 'nosuch'" in line and "bamboo populate PATH" in line


def test_populating_from_a_fifo_does_not_hang(settings, tmp_path):
    fifo = tmp_path / "incidents.jsonl"
    os.mkfifo(fifo)
    line = _one_line_error(_bamboo(settings, "populate", str(fifo), timeout=30))
    assert "not a regular file" in line


def test_a_task_id_temporal_cannot_index_is_refused_before_any_workflow_starts(settings, tmp_path):
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"jediTaskID": 2**63, "status": "broken", "errorDialog": "boom"}))
    line = _one_line_error(_bamboo(settings, "analyze", "--task-data", str(task), timeout=30))
    assert str(task) in line and "jediTaskID" in line and "out of range" in line


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(settings, tmp_path):
    checkpoint = tmp_path / "audit-checkpoint.json"
    checkpoint.write_text("not json")
    (tmp_path / "audit-signing.pub").write_text("not a key")
    env = {"BAMBOO_AUDIT_CHECKPOINT_FILE": str(checkpoint), "BAMBOO_AUDIT_SIGNING_KEY": str(tmp_path / "audit-signing.key")}
    line = _one_line_error(_bamboo(settings, "audit", "verify", extra_env=env))
    assert "audit-signing.pub" in line
    debug = _bamboo(settings, "--debug", "audit", "verify", extra_env=env)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_an_unreachable_store_is_one_line(settings):
    line = _one_line_error(_bamboo(settings, "kb", "stats",
                                   extra_env={"BAMBOO_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}))
    assert "knowledge store" in line and "bamboo dev up" in line


def test_usage_errors_stay_typer_s_own(settings):
    result = _bamboo(settings, "populate", "--no-such-option")
    assert result.returncode == 2 and "No such option" in result.stderr and "unexpected" not in result.stderr


# Issue 28, finding 10: the analyze path and the CLI take bad input as one line, before any network call.
def _task_file(tmp_path, text: str):
    task = tmp_path / "task.json"
    task.write_text(text)
    return task


def test_a_task_nested_ten_thousand_deep_is_one_line_not_a_recursion_bug(settings, tmp_path):
    task = _task_file(tmp_path, '{"jediTaskID": 5, "status": "broken", "x": ' + "[" * 10_000 + "]" * 10_000 + "}")
    line = _one_line_error(_bamboo(settings, "analyze", "--task-data", str(task), timeout=30))
    assert "nested" in line and "RecursionError" not in line and "bug" not in line, line


@pytest.mark.parametrize("status,expected", [
    ("broken\u0000", "status: the value contains a NUL character"),
    ("broken" * 1000, "status is 6000 characters long, over the 64-character limit"),
])
def test_a_status_no_workflow_id_or_clue_can_hold_is_refused_before_any_workflow(settings, tmp_path, status, expected):
    task = _task_file(tmp_path, json.dumps({"jediTaskID": 5, "status": status, "errorDialog": "boom"}))
    line = _one_line_error(_bamboo(settings, "analyze", "--task-data", str(task), timeout=30))
    assert str(task) in line and expected in line, line


def test_a_task_id_out_of_range_is_refused_before_panda_is_asked(settings):
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    asked: list[int] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            asked.append(1)
            conn.close()

    watcher = threading.Thread(target=accept, daemon=True)
    watcher.start()
    try:
        panda = {"BAMBOO_PANDA_API_URL": f"http://127.0.0.1:{listener.getsockname()[1]}/server/panda"}
        line = _one_line_error(_bamboo(settings, "analyze", "--task-id", str(2**70), extra_env=panda, timeout=30))
    finally:
        stop.set()
        watcher.join()
        listener.close()
    assert "--task-id: jediTaskID 1180591620717411303424 is out of range" in line, line
    assert not asked, "PanDA was asked for a task id no store or workflow can hold"


def _one_line_exit(result: subprocess.CompletedProcess) -> str:
    """The worker's own exit: not 0, no traceback, exactly one `bamboo worker:` line (log lines may precede it)."""
    assert result.returncode not in (0, None), (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [line for line in (result.stderr + result.stdout).splitlines() if line.startswith("bamboo worker:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_worker_without_temporal_says_so_in_one_line(settings):
    line = _one_line_exit(_bamboo(settings, "worker", extra_env={"BAMBOO_TEMPORAL_ADDRESS": "127.0.0.1:1"},
                                  timeout=120))
    assert "Cannot reach Temporal at 127.0.0.1:1" in line and "bamboo dev up" in line


def test_a_worker_without_postgres_says_so_in_one_line(settings):
    line = _one_line_exit(_bamboo(settings, "worker", timeout=120,
                                  extra_env={"BAMBOO_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}))
    assert "Cannot reach the knowledge store" in line and "bamboo dev up" in line


def test_a_worker_that_would_send_its_panda_token_in_clear_text_says_so_in_one_line(settings):
    line = _one_line_exit(_bamboo(settings, "worker", timeout=120, extra_env={
        "BAMBOO_PANDA_AUTH": "oidc", "BAMBOO_PANDA_OIDC_TOKEN": "SECRET-TOKEN", "BAMBOO_PANDA_AUTH_VO": "atlas",
        "BAMBOO_PANDA_API_URL": "http://panda.example.org/api/v1"}))
    assert "clear text" in line and "https" in line and "SECRET-TOKEN" not in line
