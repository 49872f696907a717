"""A uid of its own for every sandbox child, and the sweep that ends everything that uid still runs.

When the worker is root, each child (and, with bubblewrap, bwrap itself) runs as a uid leased from a
configured range. One run then cannot signal, ptrace or read the /proc entries of another run's
processes, RLIMIT_NPROC counts one run's processes only, and "everything the run started" is simply
"every process of that uid" — a daemon that double-forked, called setsid and left its work dir is still
found. A lease is an exclusive ``flock`` on a per-uid file in a root-only directory, so several worker
processes on one host never hand out the same uid; it is released when the child is disposed of (or
when the worker dies). Before a uid is handed out again, anything still running under it is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_FIRST_UID = 1_000_000_000
DEFAULT_UID_COUNT = 4096
LOCK_DIR = Path("/run/bamboo-sandbox-uids")
# Runs as the run's uid: kill(-1) reaches the processes that uid may signal, i.e. its own (never
# the caller itself). The caller checks /proc afterwards and repeats while any is left, so a process
# forked mid-sweep dies too (kill(-1) reporting success says nothing: it counts more than our own).
_SWEEP = "import os\nfor _ in range(3):\n    try:\n        os.kill(-1, 9)\n    except OSError:\n        pass\n"
SWEEP_ROUNDS = 20


class UidsUnavailable(RuntimeError):
    """No uid of the range is free (or the lock directory is unusable); the message says what to change."""


@dataclass
class UidLease:
    uid: int
    _fd: int | None = field(default=None, repr=False)

    @property
    def gid(self) -> int:
        return self.uid

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class RunUids:
    """Leases uids from ``[first, first + count)``; only usable by a root worker."""

    def __init__(self, *, first: int = DEFAULT_FIRST_UID, count: int = DEFAULT_UID_COUNT,
                 lock_dir: Path = LOCK_DIR, python: str = "/usr/bin/python3") -> None:
        if os.geteuid() != 0:
            raise UidsUnavailable("a uid per sandbox run needs a root worker")
        self.first, self.count, self.python = first, count, python
        self.lock_dir = lock_dir
        lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = lock_dir.lstat()
        if info.st_uid != 0 or info.st_mode & 0o077 or not lock_dir.is_dir() or lock_dir.is_symlink():
            raise UidsUnavailable(f"the uid lock directory {lock_dir} must be a root-owned directory with mode 0700")

    def lease(self) -> UidLease:
        start = random.randrange(self.count)
        for offset in range(self.count):
            uid = self.first + (start + offset) % self.count
            fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if processes_of(uid):  # left behind by a worker that died: end them before reuse
                sweep(uid, self.python)
                if processes_of(uid):
                    os.close(fd)
                    continue
            return UidLease(uid, fd)
        raise UidsUnavailable(
            f"all {self.count} sandbox uids from {self.first} are in use; raise BAMBOO_SANDBOX_UID_COUNT")


def processes_of(uid: int) -> list[int]:
    """Every live process whose real, effective or saved uid is ``uid`` (from /proc/<pid>/status, which,
    unlike the owner of /proc/<pid>, a process cannot change by making itself non-dumpable)."""
    found = []
    wanted = str(uid)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                status = fh.read()
        except OSError:
            continue
        start = status.find(b"\nUid:")
        if start < 0 or b"\nState:\tZ" in status:  # a zombie holds no resources and takes no signal
            continue
        line = status[start + 5 : status.find(b"\n", start + 5)].split()
        if wanted.encode() in line[:3]:
            found.append(int(name))
    return found


def sweep(uid: int, python: str = "/usr/bin/python3") -> bool:
    """SIGKILL every process of ``uid``; True when none is left.

    The kill is made by a helper running as that uid, so it reaches a process whatever its session,
    process group or parent; nothing is spawned when the uid runs nothing (the usual case).
    """
    for _ in range(SWEEP_ROUNDS):
        if not processes_of(uid):
            return True
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([python, "-I", "-S", "-c", _SWEEP], user=uid, group=uid, extra_groups=[], env={},
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd="/", timeout=10, check=False)
        time.sleep(0.01)  # killed processes are reaped asynchronously
    return not processes_of(uid)
