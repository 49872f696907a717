"""Stopping the embedded Postgres: pg_ctl's exit status alone does not say whether the server runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bamboo.devstack.postgres import PostgresStopError, stop_postgres


def test_a_pid_file_left_by_a_server_that_is_gone_counts_as_stopped(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "postmaster.pid").write_text(f"{gone.pid}\n{tmp_path}\n")
    stop_postgres(tmp_path)  # no pg_ctl error about a process that no longer exists


def test_a_server_that_does_not_stop_is_a_clear_error(tmp_path):
    # A live process that ignores the fast-shutdown signal stands in for a postmaster that hangs.
    stubborn = subprocess.Popen([sys.executable, "-c",
                                 "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"])
    try:
        (tmp_path / "postmaster.pid").write_text(f"{stubborn.pid}\n{tmp_path}\n")
        with pytest.raises(PostgresStopError) as caught:
            stop_postgres(tmp_path, timeout_s=1)
        message = str(caught.value)
        assert f"pid {stubborn.pid}" in message and str(tmp_path) in message
        assert "bamboo dev down" in message and f"kill {stubborn.pid}" in message
    finally:
        stubborn.kill()
        stubborn.wait()
