"""Embedded PostgreSQL 16 with pgvector from the `pgserver` pip package.

pgserver listens on a Unix socket inside the data directory only, so it never competes for a TCP
port and is unreachable from the network.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import psycopg

from bamboo.devstack.state import pid_alive

# pgserver pulls in platformdirs, which warns about XDG_RUNTIME_DIR on headless hosts: not actionable.
warnings.filterwarnings("ignore", module=r"platformdirs(\..*)?$")

DATABASE = "bamboo"


def start_postgres(pgdata: Path) -> tuple[int | None, str]:
    """Start (or find running) the embedded server and make sure the `bamboo` database exists.

    Returns (pid, database URL). Left running on exit: `bamboo dev down` stops it.
    """
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    import pgserver

    pgdata.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    admin_uri = server.get_uri()
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    return server.get_pid(), server.get_uri(DATABASE)


class PostgresStopError(RuntimeError):
    """The embedded server is still running after pg_ctl gave up on stopping it."""


def stop_postgres(pgdata: Path, timeout_s: int = 60) -> None:
    """Fast shutdown (open sessions are disconnected, nothing committed is lost).

    pg_ctl also fails when the server exits under it (between our look at the pid file and its
    signal), so its exit status alone does not say whether the server still runs: the postmaster's
    pid does. A server still running is an error that says what pg_ctl said and what to do."""
    from pgserver._commands import POSTGRES_BIN_PATH

    pid = postmaster_pid(pgdata)
    if pid is None:
        return
    # Files, not pipes: pg_ctl's children may keep a pipe open and hang the read (as pgserver notes).
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "-t", str(timeout_s), "stop"],
            stdout=out, stderr=subprocess.STDOUT, text=True, user="pgserver" if _is_root() else None, check=False)
        out.seek(0)
        said = out.read().strip()
    if result.returncode == 0:
        return
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        raise PostgresStopError(
            f"PostgreSQL (pid {pid}, data in {pgdata}) did not stop: pg_ctl exited with {result.returncode}"
            f"{': ' + said if said else ''}. Run `bamboo dev down` again, or stop it with `kill {pid}`.")


def postmaster_pid(pgdata: Path) -> int | None:
    """The running server's pid from its pid file; None when there is no pid file or no such process."""
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    pid = int(first) if first.isdigit() else None
    return pid if pid_alive(pid) else None


def _is_root() -> bool:
    import os

    return os.geteuid() == 0
