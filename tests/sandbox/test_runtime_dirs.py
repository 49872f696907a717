"""The runtime directories of runners that were killed are removed by the next runner, and nothing else is.

A worker killed by SIGKILL or SIGTERM never ran its runner's finalizer, so its ``bamboo-sandbox-rt-*``
directory stayed in the temp dir for ever. Every test points the sweep at ``tmp_path``: none touches the real
temp dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from bamboo.sandbox import isolation as isolation_mod
from bamboo.sandbox import runtime_dirs
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox.runtime_dirs import NO_OWNER_GRACE_S, OWNER_FILE, PREFIX, make_runtime_dir, owner_of, sweep_stale_runtime_dirs


def dead_owner() -> dict[str, Any]:
    """The record of a process that has ended (and been reaped): taken while it ran, as its runner would have."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        record = owner_of(proc.pid)
    finally:
        proc.communicate(b"")
    assert proc.returncode == 0
    return record


def runtime_dir(parent: Path, name: str, owner: dict[str, Any] | None) -> Path:
    """A directory laid out as a runner lays out its own: the child runner's copy, a 0o555 ``empty/``."""
    path = parent / f"{PREFIX}{name}"
    path.mkdir(mode=0o755)
    (path / "child_runner.py").write_text("# copy\n")
    (path / "empty").mkdir(mode=0o555)
    if owner is not None:
        (path / OWNER_FILE).write_text(json.dumps(owner))
    return path


def test_a_dir_whose_owner_has_ended_is_removed(tmp_path):
    stale = runtime_dir(tmp_path, "dead", dead_owner())
    assert sweep_stale_runtime_dirs(tmp_path) == [stale.name]
    assert not stale.exists()


def test_a_dir_whose_owner_is_alive_is_kept(tmp_path):
    mine = runtime_dir(tmp_path, "alive", owner_of(os.getpid()))
    assert sweep_stale_runtime_dirs(tmp_path) == []
    assert (mine / "child_runner.py").exists()


def test_a_reused_pid_does_not_keep_a_dir(tmp_path):
    """The pid is alive but started at another time: another process has it now, the owner is gone."""
    record = owner_of(os.getpid())
    if record["start"] is None:
        pytest.skip("no /proc: the start time cannot be read")
    record["start"] = str(int(record["start"]) + 1)
    stale = runtime_dir(tmp_path, "reused", record)
    assert sweep_stale_runtime_dirs(tmp_path) == [stale.name]


def test_a_dir_of_another_pid_namespace_is_kept(tmp_path):
    """A temp dir shared between containers: a pid of another namespace says nothing about this one's."""
    record = dead_owner()
    record["pidns"] = "pid:[1]"
    kept = runtime_dir(tmp_path, "elsewhere", record)
    assert sweep_stale_runtime_dirs(tmp_path) == []
    assert kept.exists()


def test_a_young_dir_without_owner_is_kept_and_an_old_one_removed(tmp_path):
    """Without a record the runner may be writing it right now, or be of an older version: only age decides."""
    young = runtime_dir(tmp_path, "young", None)
    old = runtime_dir(tmp_path, "old", None)
    long_ago = time.time() - NO_OWNER_GRACE_S - 60
    os.utime(old, (long_ago, long_ago))
    assert sweep_stale_runtime_dirs(tmp_path) == [old.name]
    assert young.exists() and not old.exists()


def test_an_unreadable_owner_record_counts_as_none(tmp_path):
    young = runtime_dir(tmp_path, "garbled", None)
    (young / OWNER_FILE).write_text('{"pid": ')
    assert sweep_stale_runtime_dirs(tmp_path) == []
    assert young.exists()


def test_a_symlink_with_the_prefix_is_left_alone(tmp_path):
    """The link is not followed: neither it nor what it points to (here a dead runner's look-alike) is removed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = runtime_dir(elsewhere, "target", dead_owner())
    link = tmp_path / f"{PREFIX}link"
    link.symlink_to(target, target_is_directory=True)
    assert sweep_stale_runtime_dirs(tmp_path) == []
    assert link.is_symlink() and (target / OWNER_FILE).exists() and (target / "empty").is_dir()


def test_only_top_level_dirs_with_the_prefix_are_looked_at(tmp_path):
    other = tmp_path / "unrelated"
    other.mkdir()
    nested = runtime_dir(other, "nested", dead_owner())
    plain = tmp_path / f"{PREFIX}file"
    plain.write_text("not a directory")
    assert sweep_stale_runtime_dirs(tmp_path) == []
    assert nested.exists() and plain.exists()


def test_a_read_only_empty_subdir_does_not_stop_the_removal(tmp_path):
    """``empty/`` is 0o555; with a file left in it, its removal needs write permission on it (without root)."""
    stale = runtime_dir(tmp_path, "readonly", dead_owner())
    os.chmod(stale / "empty", 0o755)
    (stale / "empty" / "left").write_text("x")
    os.chmod(stale / "empty", 0o555)
    assert sweep_stale_runtime_dirs(tmp_path) == [stale.name]
    assert not stale.exists()


def test_a_failing_sweep_never_raises(tmp_path):
    assert sweep_stale_runtime_dirs(tmp_path / "missing") == []


def test_a_new_runtime_dir_records_its_owner_and_survives_a_sweep(tmp_path):
    made = make_runtime_dir(tmp_path)
    assert made.parent == tmp_path and made.name.startswith(PREFIX)
    record = json.loads((made / OWNER_FILE).read_text())
    assert record == owner_of(os.getpid())
    assert sweep_stale_runtime_dirs(tmp_path) == []
    assert made.exists()


async def test_a_new_runner_removes_a_killed_runners_dir(tmp_path, monkeypatch):
    """The sweep runs when a runner is made, before it makes its own directory (which it records and keeps)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(isolation_mod, "probe", lambda plan, *_: "bwrap: No permissions to create new namespace")
    stale = runtime_dir(tmp_path, "killed", dead_owner())
    runner = SandboxRunner(isolation="degraded")
    try:
        assert not stale.exists()
        own = runner._runtime_dir
        assert own.parent == tmp_path and (own / OWNER_FILE).exists()
        assert runtime_dirs.sweep_stale_runtime_dirs(tmp_path) == [] and own.exists()
    finally:
        await runner.close()
    assert not own.exists()
