"""Embedded PostgreSQL 16 with pgvector from the `pgserver` pip package.

pgserver listens on a Unix socket inside the data directory only, so it never competes for a TCP
port and is unreachable from the network.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import psycopg

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


def stop_postgres(pgdata: Path) -> None:
    from pgserver._commands import pg_ctl

    if not (pgdata / "postmaster.pid").exists():
        return
    pg_ctl(["-m", "fast", "-w", "stop"], pgdata=pgdata, user="pgserver" if _is_root() else None)


def _is_root() -> bool:
    import os

    return os.geteuid() == 0
