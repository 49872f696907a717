"""The runner's runtime directory (``bamboo-sandbox-rt-*`` in the temp dir): made with its owner recorded, and
the ones whose owner is gone removed when a runner starts.

A runner used to remove its runtime directory only at garbage collection or interpreter exit. A worker killed by
SIGKILL, or by SIGTERM (which ends Python without running atexit), left its directory behind for ever: the test
suite, which kills workers on purpose, left 23 after four runs. Nothing else removes them, so the next runner
does (``sweep_stale_runtime_dirs``).

The owner is recorded in ``OWNER_FILE`` inside the directory, as JSON: the pid, the process's start time
(``/proc/<pid>/stat`` field 22, in clock ticks since boot) and its pid namespace (``/proc/self/ns/pid``). The
pid alone is not enough, as pids are reused; the start time tells a reused pid from the owner (a pid cannot
be reused within one clock tick). The pid namespace is there because a temp dir may be shared between
containers: a pid from another namespace means nothing here, so such a directory is never judged. Where
``/proc`` is missing, the start time and namespace are ``null`` and only the pid is checked.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "bamboo-sandbox-rt-"
OWNER_FILE = "owner.json"
# A directory without an owner record is left alone this long. Its runner may be writing the record right now
# (that takes microseconds), or be of a version that wrote none: a worker of that version is restarted when it
# is upgraded, so an hour covers a rolling upgrade's overlap; after it such a directory is a leftover of the
# older version's (its record can no longer appear) and is removed. Its age is its modification time.
NO_OWNER_GRACE_S = 3600.0
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of ``pid`` from ``/proc/<pid>/stat`` (fields 3 and 22), or None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name (field 2) may hold spaces and parentheses
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def owner_of(pid: int) -> dict[str, Any]:
    """The owner record of ``pid``, a process of this pid namespace."""
    facts = _proc_stat(pid)
    return {"pid": pid, "start": facts[1] if facts else None, "pidns": _pid_namespace()}


def make_runtime_dir(parent: str | os.PathLike[str] | None = None) -> Path:
    """A new ``bamboo-sandbox-rt-*`` directory under ``parent`` (the temp dir), its owner (this process) recorded.

    The record is written before the directory is used; a failure to write it removes the directory and
    raises, as a directory without a record would be removed under a live runner after ``NO_OWNER_GRACE_S``."""
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    try:
        fd = os.open(path / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(owner_of(os.getpid()), fh)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def _read_owner(dir_fd: int) -> dict[str, Any] | None:
    """The record in the directory open at ``dir_fd``; None when it has none, or none that can be read."""
    try:
        fd = os.open(OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            record = json.loads(fh.read(4096))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or type(record.get("pid")) is not int or record["pid"] <= 0:
        return None
    return record


def _owner_gone(record: dict[str, Any]) -> bool:
    """True only when the recorded owner is surely not running: its pid is free, a zombie, or another process."""
    if record.get("pidns") != _pid_namespace():
        return False  # another container's process (or /proc appeared or vanished): not ours to judge
    pid = record["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # exists, under another uid
    facts = _proc_stat(pid)
    if facts is None:
        return False
    state, start = facts
    if state == "Z":
        return True
    return record.get("start") is not None and record["start"] != start


def _make_dirs_writable(name: str, parent_fd: int, uid: int) -> None:
    """Give the owner rwx on every directory of the tree ``name`` (the runner's ``empty/`` is 0o555, and a
    run may have left others), so that removal works without root. Symlinks are neither followed nor changed;
    a directory of another uid is left as it is."""
    top = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if stat.S_ISDIR(top.st_mode) and top.st_uid == uid:
        os.chmod(name, stat.S_IMODE(top.st_mode) | stat.S_IRWXU, dir_fd=parent_fd)
    for _, dirnames, _, walk_fd in os.fwalk(name, dir_fd=parent_fd, follow_symlinks=False):
        for sub in dirnames:
            try:
                st = os.stat(sub, dir_fd=walk_fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
                    os.chmod(sub, stat.S_IMODE(st.st_mode) | stat.S_IRWXU, dir_fd=walk_fd)
            except OSError:
                continue


def sweep_stale_runtime_dirs(parent: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the runtime directories under ``parent`` (default: the temp dir) whose runner is gone; the names
    removed.

    Why: a worker killed by a signal never removes its runtime directory (see the module's docstring), so the
    next runner does. Only the top level of ``parent`` is listed, and only entries named ``PREFIX*`` are
    looked at. An entry is removed only when it is a real directory (not a symlink) of this uid whose owner
    record names a process that is gone (``_owner_gone``), or when it has no readable record and was last
    modified more than ``NO_OWNER_GRACE_S`` ago. Everything is done relative to directory descriptors opened
    without following symlinks, and the removal is ``shutil.rmtree``'s descriptor-based walk.

    Never raises: a sweep that fails is logged and the runner starts all the same."""
    removed: list[str] = []
    try:
        root = os.fspath(parent) if parent is not None else tempfile.gettempdir()
        uid = os.geteuid()
        parent_fd = os.open(root, _OPEN_DIR)
    except Exception as exc:
        log.debug("runtime-dir sweep skipped: %s", exc)
        return removed
    try:
        with os.scandir(parent_fd) as entries:
            names = [e.name for e in entries if e.name.startswith(PREFIX)]
        for name in names:
            try:
                if _is_stale(name, parent_fd, uid):
                    _make_dirs_writable(name, parent_fd, uid)
                    shutil.rmtree(name, dir_fd=parent_fd)
                    removed.append(name)
            except Exception as exc:
                log.warning("stale sandbox runtime directory %s not removed: %s", os.path.join(root, name), exc)
    except Exception as exc:
        log.warning("runtime-dir sweep of %s stopped: %s", root, exc)
    finally:
        os.close(parent_fd)
    if removed:
        log.info("removed %d stale sandbox runtime director%s under %s", len(removed),
                 "y" if len(removed) == 1 else "ies", root)
    return removed


def _is_stale(name: str, parent_fd: int, uid: int) -> bool:
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        return False
    try:
        fd = os.open(name, _OPEN_DIR, dir_fd=parent_fd)
    except OSError:
        return False
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            return False  # swapped meanwhile
        record = _read_owner(fd)
    finally:
        os.close(fd)
    if record is None:
        return time.time() - st.st_mtime > NO_OWNER_GRACE_S
    return _owner_gone(record)
