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

from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bamboo.stack_state import pid_alive

# pgserver pulls in platformdirs, which warns about XDG_RUNTIME_DIR on headless hosts: not actionable.
warnings.filterwarnings("ignore", module=r"platformdirs(\..*)?$")

DATABASE = "bamboo"
# The role the app connects as: not the owner of the schema (the superuser `postgres` is, and runs the
# migrations), so its grants refuse UPDATE, DELETE and TRUNCATE on the audit table. pgserver trusts
# every local connection on its socket, so this separates the app's own statements from the owner's
# powers; it is not authentication against someone who can reach the socket.
APP_ROLE = "bamboo_app"


class PostgresStartError(RuntimeError):
    """The embedded server did not come up (or did not accept connections) in time."""


# A fresh initdb and start on a loaded machine takes tens of seconds; a stale server clears in a few.
START_WAIT_S = 120.0


def start_postgres(pgdata: Path, wait_s: float = START_WAIT_S) -> tuple[int | None, str]:
    """Start (or find running) the embedded server and make sure the `bamboo` database exists.

    Returns (pid, database URL). Left running on exit: `bamboo dev down` stops it.

    Right after a crash (or a `kill -9`) the old postmaster's pid file, its children and its socket
    linger for a moment: pgserver may take the server for running and the connection is refused, or
    the new start fails while the old shared memory is still held. Both pass within seconds, so the
    start is retried for `wait_s` before it becomes an error that says where the log is."""
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    pgdata.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _start_once(pgdata)
        except (psycopg.OperationalError, subprocess.SubprocessError, AssertionError, OSError) as exc:
            if time.monotonic() >= deadline:
                said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise PostgresStartError(
                    f"the embedded PostgreSQL in {pgdata} did not accept connections within {wait_s:.0f} s ({said}); "
                    f"see its log {pgdata / 'log'}, then run `bamboo dev up` again") from exc
            _forget_server(pgdata)
            time.sleep(0.5)


def _start_once(pgdata: Path) -> tuple[int | None, str]:
    import pgserver

    server = pgserver.get_server(pgdata, cleanup_mode=None)
    admin_uri = server.get_uri()
    with psycopg.connect(admin_uri, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    return server.get_pid(), server.get_uri(DATABASE)


def ensure_app_role(owner_url: str, role: str = APP_ROLE) -> str:
    """Create the app's login role (no superuser, no role or database creation) if it is missing;
    returns the URL the app connects with. Its privileges are granted after the migrations."""
    with psycopg.connect(owner_url, autocommit=True, connect_timeout=5) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE").format(sql.Identifier(role)))
    return with_user(owner_url, role)


def with_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1] if "@" in parts.netloc else parts.netloc
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


def _forget_server(pgdata: Path) -> None:
    """pgserver keeps one handle per data directory per process; a retry must look at the server again."""
    import pgserver

    instances = getattr(pgserver.PostgresServer, "_instances", None)
    if isinstance(instances, dict):
        instances.pop(pgdata.expanduser().resolve(), None)


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
