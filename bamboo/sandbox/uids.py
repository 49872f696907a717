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
import errno
import fcntl
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_FIRST_UID = 1_000_000_000
DEFAULT_UID_COUNT = 4096
LOCK_DIR = Path("/run/bamboo-sandbox-uids")
SWEEP_ROUNDS = 20
# More processes than a run may start (RLIMIT_NPROC) means the scan is being outrun: kill what is stopped, rescan.
MAX_SWEPT = 4096


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
                 lock_dir: Path = LOCK_DIR) -> None:
        if os.geteuid() != 0:
            raise UidsUnavailable("a uid per sandbox run needs a root worker")
        self.first, self.count = first, count
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
                sweep(uid)
                if processes_of(uid):
                    os.close(fd)
                    continue
            return UidLease(uid, fd)
        raise UidsUnavailable(
            f"all {self.count} sandbox uids from {self.first} are in use; raise BAMBOO_SANDBOX_UID_COUNT")


def runs(status: bytes) -> bool:
    """Whether the process whose /proc/<pid>/status is ``status`` still runs code. A zombie holds no resources
    and takes no signal, unless only its main thread ended: its other threads run on (and hold its memory)
    while /proc shows the process as a zombie, so a run that ended its main thread with a raw exit outlived
    the sweep and read a later run's memory through /proc/<pid>/mem."""
    if b"\nState:\tZ" not in status:
        return True
    start = status.find(b"\nThreads:")
    try:
        return start >= 0 and int(status[start + 9 : status.find(b"\n", start + 9)]) > 1
    except ValueError:
        return True


def processes_of(uid: int, only: int | None = None) -> list[int]:
    """Every live process whose real, effective or saved uid is ``uid`` (from /proc/<pid>/status, which,
    unlike the owner of /proc/<pid>, a process cannot change by making itself non-dumpable); with ``only``,
    just that pid if it is one."""
    found = []
    wanted = str(uid)
    for name in [str(only)] if only is not None else os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                status = fh.read()
        except OSError:
            continue
        start = status.find(b"\nUid:")
        if start < 0 or not runs(status):
            continue
        line = status[start + 5 : status.find(b"\n", start + 5)].split()
        if wanted.encode() in line[:3]:
            found.append(int(name))
    return found


def sweep(uid: int) -> bool:
    """SIGKILL every process of ``uid``; True when none is left.

    From the worker (root), never from a helper running as that uid: such a helper has no seccomp filter and no
    no_new_privs, and a daemon the run left could stop it, write code into it through /proc/<pid>/mem and leave
    the sandbox, or simply kill every helper and outlive the run. Each round first stops every process found
    (a stopped process cannot fork), scanning again until no new one appears, then kills them all. Each signal
    goes through a pidfd opened before the process's uid is checked, so a pid reused by another process is
    never signalled; a kernel without pidfds (before Linux 5.3) gets the signal by pid, the uid checked again
    right before it.
    """
    for _ in range(SWEEP_ROUNDS):
        stopped: list[_Process] = []
        tried: set[int] = set()  # a pid that could not be had is not tried again this round
        try:
            while new := [pid for pid in processes_of(uid) if pid not in tried]:
                tried.update(new)
                for pid in new:
                    process = _Process.of(pid, uid)
                    if process is not None:
                        stopped.append(process)
                        process.signal(signal.SIGSTOP)
                if len(tried) > MAX_SWEPT:
                    break
            for process in stopped:
                process.signal(signal.SIGKILL)
        finally:
            for process in stopped:
                process.close()
        if not tried:  # nothing of the uid runs: the common end of a run, with no wait (it is on every run's path)
            return True
        time.sleep(0.01)  # killed processes are reaped asynchronously
        if not processes_of(uid):
            return True
    return not processes_of(uid)


@dataclass
class _Process:
    """A process of the uid being swept, held by a pidfd where the kernel has them."""

    pid: int
    uid: int
    fd: int | None

    @classmethod
    def of(cls, pid: int, uid: int) -> "_Process | None":
        """``pid`` when it is (still) a process of ``uid``; None when it is gone or another's."""
        try:
            fd: int | None = os.pidfd_open(pid)
        except OSError as exc:
            if exc.errno != errno.ENOSYS:
                return None  # gone
            fd = None
        if pid in processes_of(uid, only=pid):
            return cls(pid, uid, fd)
        if fd is not None:
            os.close(fd)
        return None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(OSError):
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            elif self.pid in processes_of(self.uid, only=self.pid):
                os.kill(self.pid, sig)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
