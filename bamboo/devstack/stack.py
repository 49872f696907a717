"""`bamboo dev up | down | status`: the whole embedded stack, idempotently.

Each service is recorded in `<data_dir>/stack.json`; `up` starts only what is not already running (and
restarts a worker started from other sources than the checkout holds now), `down` stops what the file names,
`status` reports what answers where.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from bamboo.devstack.code_version import source_fingerprint
from bamboo.devstack.ports import port_open
from bamboo.devstack.postgres import ensure_app_role, start_postgres, stop_postgres
from bamboo.stack_state import ServiceState, StackState, load_state, pid_alive, save_state
from bamboo.devstack.temporal_server import start_temporal
from bamboo.settings import Settings


class ServiceStatus(BaseModel):
    name: str
    running: bool
    where: str
    pid: int | None = None
    log: str | None = None
    note: str = ""


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


# What the stack writes that holds sessions' histories, logs or database addresses: its owner's alone. The data
# directory itself stays readable: embedded Postgres, run as its own user when the stack runs as root, needs
# to traverse it (pgserver opens it to others), so the files and folders in it are closed instead.
PRIVATE_DIRS = ("logs",)
PRIVATE_FILES = ("temporal.db", "temporal.db-journal", "temporal.db-wal", "temporal.db-shm", "stack.json")


def keep_private(data: Path) -> None:
    """Close what the stack wrote in ``data`` to other users. Created 0755 and 0644, a degraded sandbox run (its
    own uid, the host's filesystem) read every session's code and tool results from the embedded Temporal's
    database and the worker's log."""
    for name in PRIVATE_DIRS:
        (data / name).mkdir(mode=0o700, exist_ok=True)
        (data / name).chmod(0o700)
    for name in PRIVATE_FILES:
        if (data / name).exists():
            (data / name).chmod(0o600)


def up(settings: Settings, *, with_worker: bool = True, echo=print) -> StackState:
    data = settings.resolved_data_dir()
    data.mkdir(parents=True, exist_ok=True)
    keep_private(data)
    logs = data / "logs"
    state = load_state(data)

    if settings.database_url:
        echo("postgres: external (BAMBOO_DATABASE_URL), not started")
    else:
        pid, owner_url = start_postgres(data / "pgdata")
        state.postgres = ServiceState(pid=pid, address=owner_url, log=str(data / "pgdata" / "log"))
        # The app connects as `bamboo_app`; the superuser owns the schema and runs the migrations.
        state.database_url = ensure_app_role(owner_url)
        state.owner_database_url = owner_url
        save_state(data, state)
        echo(f"postgres: running (pid {pid})")
    _ensure_audit_key(settings, echo)

    host, port = _split(settings.temporal_address)
    if not settings.temporal_embedded:
        echo(f"temporal: external at {settings.temporal_address}, not started")
    elif pid_alive(state.temporal.pid) and port_open(host, port):
        echo(f"temporal: already running (pid {state.temporal.pid})")
    else:
        proc = start_temporal(data / "temporal.db", host, port, settings.temporal_ui_port, logs / "temporal.log")
        state.temporal = ServiceState(pid=proc.pid, address=settings.temporal_address, log=str(logs / "temporal.log"))
        state.ui_url = f"http://{host}:{settings.temporal_ui_port}" if settings.temporal_ui_port else None
        echo(f"temporal: started (pid {proc.pid}), Web UI {state.ui_url}")
    save_state(data, state)

    if with_worker:
        state.worker = ensure_worker(settings, state, logs / "worker.log", echo)
        save_state(data, state)
    keep_private(data)  # again: Temporal has created its database by now
    return state


def ensure_worker(settings: Settings, state: StackState, log: Path, echo=print) -> ServiceState:
    """The running worker, unless it runs other code than the sources hold now: a worker keeps the modules it
    imported, while new workflow runs read the workflow modules afresh, so a worker left running across a code
    change failed every session's task (new workflow code, old contracts). Such a worker is restarted."""
    current = source_fingerprint()
    if pid_alive(state.worker.pid):
        if state.worker.code == current:
            echo(f"worker: already running (pid {state.worker.pid})")
            return state.worker
        _terminate(state.worker.pid)
        echo(f"worker: stopped (pid {state.worker.pid}): the code changed since it started")
    worker = start_worker(settings, state, log).model_copy(update={"code": current})
    echo(f"worker: started (pid {worker.pid}), log {worker.log}")
    return worker


def _ensure_audit_key(settings: Settings, echo) -> None:
    """The key that signs audit checkpoints, under the data directory's keys/ (never in the database)."""
    from bamboo.store import resolve_store_location
    from bamboo.store.audit_checkpoint import create_signing_key

    try:
        where = resolve_store_location(settings)
    except RuntimeError:
        return
    if where.signing_key is None:
        return
    existed = where.signing_key.exists()
    create_signing_key(where.signing_key)
    if not existed:
        echo(f"audit: signing key created at {where.signing_key} (checkpoints in {where.checkpoint_file})")


def worker_environment(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment: the caller's, and the data directory. On the embedded stack the worker finds the
    embedded Postgres, its owner and the audit checkpoint from the stack's state, as the CLI does; it is not
    handed BAMBOO_DATABASE_URL, which makes a worker a deployment with a database of its own: such a worker pins
    no administrator unless BAMBOO_ADMIN_KEYS_FILE says so, and refuses the demo's, so the demo's registrations
    counted for nothing and every request to an investigation was refused as unregistered."""
    env = dict(base)
    env["BAMBOO_DATA_DIR"] = str(settings.resolved_data_dir())
    return env


def start_worker(settings: Settings, state: StackState, log: Path) -> ServiceState:
    env = worker_environment(settings, os.environ)
    proc = subprocess.Popen([sys.executable, "-m", "worker"], stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    time.sleep(1.0)
    if proc.poll() is not None:
        said = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        raise RuntimeError(f"the worker exited at start-up (code {proc.returncode}): {said[-1] if said else 'no output'}; "
                           f"see {log} for the rest, fix it and run `bamboo dev up` again")
    return ServiceState(pid=proc.pid, log=str(log))


def _terminate(pid: int | None, timeout: float = 15) -> None:
    if pid is None or not pid_alive(pid):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        os.killpg(pid, signal.SIGKILL)


def down(settings: Settings, echo=print) -> None:
    data = settings.resolved_data_dir()
    state = load_state(data)
    _terminate(state.worker.pid)
    echo("worker: stopped")
    _terminate(state.temporal.pid)
    echo("temporal: stopped (history kept in temporal.db)")
    if not settings.database_url and (data / "pgdata").exists():
        stop_postgres(data / "pgdata")
        echo("postgres: stopped (data kept in pgdata)")
    state.worker = ServiceState()
    state.temporal = ServiceState()
    state.postgres = ServiceState()
    save_state(data, state)


def status(settings: Settings) -> list[ServiceStatus]:
    data = settings.resolved_data_dir()
    state = load_state(data)
    host, port = _split(settings.temporal_address)
    pg_running = bool(state.postgres.pid and pid_alive(state.postgres.pid))
    out = [
        ServiceStatus(name="temporal", running=port_open(host, port), where=settings.temporal_address,
                      pid=state.temporal.pid, log=state.temporal.log,
                      note=(f"Web UI {state.ui_url}" if state.ui_url else "") if settings.temporal_embedded else "external"),
        ServiceStatus(name="postgres", running=pg_running if not settings.database_url else True,
                      where="external" if settings.database_url else (state.database_url or "-"),
                      pid=state.postgres.pid, log=state.postgres.log),
        ServiceStatus(name="worker", running=pid_alive(state.worker.pid), where="local process",
                      pid=state.worker.pid, log=state.worker.log),
    ]
    return out
