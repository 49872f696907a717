"""What the embedded stack is running, recorded on disk so any later command (another terminal,
days later) finds the same services without configuration."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, Field


class ServiceState(BaseModel):
    pid: int | None = None
    address: str | None = None
    log: str | None = None
    code: str | None = None  # the worker's: the sources' fingerprint when it started (bamboo.devstack.code_version)


class StackState(BaseModel):
    temporal: ServiceState = Field(default_factory=ServiceState)
    postgres: ServiceState = Field(default_factory=ServiceState)
    worker: ServiceState = Field(default_factory=ServiceState)
    llm: ServiceState = Field(default_factory=ServiceState)
    database_url: str | None = None
    owner_database_url: str | None = None
    ui_url: str | None = None


def state_path(data_dir: Path) -> Path:
    return data_dir / "stack.json"


def load_state(data_dir: Path) -> StackState:
    path = state_path(data_dir)
    if not path.exists():
        return StackState()
    return StackState.model_validate_json(path.read_text())


def save_state(data_dir: Path, state: StackState) -> None:
    """Write atomically so a crash mid-write never leaves a half file behind, readable by its owner alone (it
    names the database's addresses)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_path(data_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(state.model_dump(), indent=2))
    tmp.chmod(0o600)
    os.replace(tmp, state_path(data_dir))


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return True
