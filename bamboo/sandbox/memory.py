"""One memory bound for a whole run, however many processes it forks.

RLIMIT_AS caps each process; a script that forks multiplies it (the bound would be RLIMIT_NPROC ×
RLIMIT_AS). So every run also gets a total:

* a **cgroup v2 leaf** of its own (``memory.max``, no swap) when the worker sits in a cgroup v2
  hierarchy that lets it create children with the memory controller; the kernel then enforces the
  total, page cache and shared memory included, and ``cgroup.kill`` ends the tree;
* otherwise an **RSS watchdog**: a thread that polls ``/proc`` every ``WATCHDOG_INTERVAL_S`` for the
  run's processes (those of the run's own uid, else the child's descendants) and kills the run when
  their anonymous plus shared-memory resident size, plus what the run holds in files on memory
  (``held``, looked at every ``HELD_INTERVAL_S``), passes the total. Files on memory are pages no process
  maps: under bubblewrap the run's own tmpfs mounts (``TmpfsInNamespace``, their used size), in degraded
  mode the run's uid's files on the host's tmpfs (``leftovers.OwnedMemoryFiles``). The other ways to hold
  unmapped memory — memfds, SysV and POSIX ipc objects — the seccomp filter refuses, and /dev/shm is
  read-only under bubblewrap. The watchdog may miss a spike shorter than one poll; RLIMIT_AS still bounds
  each process meanwhile.

The run's result says which of the two applied (``memory_guard``).

In degraded mode the same watchdog also holds the run to its disk cap (``disk``, ``leftovers.OwnedFiles``: what
its uid holds in files on every filesystem), with or without a cgroup: the run writes to the host's own
filesystems, which no memory total covers. Under bubblewrap the run's writable places are its size-capped tmpfs
mounts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from bamboo.sandbox.contract import MemoryGuardKind

log = logging.getLogger(__name__)

WATCHDOG_INTERVAL_S = 0.05
HELD_INTERVAL_S = 0.2
PAGE = os.sysconf("SC_PAGE_SIZE")


def cgroup2_base() -> Path | None:
    """The worker's own cgroup v2 directory, when one is mounted and writable; else None."""
    mount = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                mount = left.split()[4]
                break
    if mount is None:
        return None
    own = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = line[3:].strip()
    if own is None:
        return None
    base = Path(mount) / own.lstrip("/")
    return base if os.access(base, os.W_OK) else None


class CgroupParent:
    """Creates one leaf per run under the worker's cgroup. Built only when the probe proves it works."""

    def __init__(self, base: Path) -> None:
        self.base = base

    @classmethod
    def probe(cls) -> "CgroupParent | None":
        base = cgroup2_base()
        if base is None:
            return None
        parent = cls(base)
        try:
            parent._enable_memory()
            leaf = parent.leaf(64 * 1024 * 1024)
        except OSError as exc:
            log.info("cgroup v2 memory leaves are not available here (%s); the RSS watchdog bounds runs", exc)
            return None
        leaf.remove()
        return parent

    def _enable_memory(self) -> None:
        """Make the memory controller available to children of the worker's cgroup. cgroup v2 lets a
        cgroup hand controllers down only while it holds no process itself, so the worker first moves
        into a leaf of its own next to the runs' leaves."""
        control = self.base / "cgroup.subtree_control"
        if "memory" in control.read_text().split():
            return
        if "memory" not in (self.base / "cgroup.controllers").read_text().split():
            raise OSError("the memory controller is not available in this cgroup")
        try:
            control.write_text("+memory")
        except OSError:
            own = self.base / "bamboo-worker"
            own.mkdir(exist_ok=True)
            (own / "cgroup.procs").write_text(str(os.getpid()))
            control.write_text("+memory")

    def leaf(self, limit_bytes: int) -> "CgroupLeaf":
        path = self.base / f"bamboo-run-{secrets.token_hex(6)}"
        path.mkdir(mode=0o755)
        try:
            (path / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
            with contextlib.suppress(OSError):  # an OOM kill ends the whole run, not one of its processes
                (path / "memory.oom.group").write_text("1")
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        return CgroupLeaf(path)


class CgroupLeaf:
    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def oom_killed(self) -> bool:
        with contextlib.suppress(OSError, ValueError):
            for line in (self.path / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        return False

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")

    def remove(self) -> None:
        self.kill()
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                threading.Event().wait(0.02)  # the killed processes are still being reaped


class RssWatchdog:
    """Polls the run's processes' resident memory, and what the run holds in files on memory (``held``, given
    the live pids), from a thread; over the total it kills them all. ``limit_bytes`` None: a cgroup holds the
    memory total, and only the disk is watched.

    With ``disk`` (degraded mode), what the run holds in files anywhere is counted on the same cadence as
    ``held`` (a directory walk: every ``held_interval_s``, not every poll) and held to ``disk_limit_bytes``.
    Memory is looked at first: a file on /dev/shm counts against both, and the memory total is the one reported."""

    def __init__(self, *, limit_bytes: int | None, members: Callable[[], list[int]],
                 interval_s: float = WATCHDOG_INTERVAL_S, held: Callable[[list[int]], int] | None = None,
                 held_interval_s: float = HELD_INTERVAL_S, disk: Callable[[list[int]], int] | None = None,
                 disk_limit_bytes: int = 0) -> None:
        self.limit_bytes = limit_bytes
        self._members = members
        self._interval = interval_s
        self._held = held
        self._held_every = max(1, round(held_interval_s / interval_s))
        self._disk = disk
        self.disk_limit_bytes = disk_limit_bytes
        self._stop = threading.Event()
        self.tripped = False
        self.over_disk = False
        self.peak_bytes = 0
        self.disk_peak_bytes = 0
        self._thread = threading.Thread(target=self._loop, name="sandbox-rss-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def signal_stop(self) -> None:
        """Tell the thread to stop, without waiting for it (it may be counting): it kills nothing after this."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _loop(self) -> None:
        looks = 0
        held = 0
        while not self._stop.is_set():
            pids = self._members()
            # Not at the start: a run has written nothing yet, and a run shorter than one interval is not made to
            # wait for a walk of the shared temp dirs (what it wrote is removed with it all the same).
            counting = looks > 0 and looks % self._held_every == 0
            looks += 1
            if self.limit_bytes is not None:
                if counting and self._held is not None:
                    held = self._counted(self._held, pids, self.limit_bytes, "files on memory")
                total = sum(resident_bytes(pid) for pid in pids) + held
                self.peak_bytes = max(self.peak_bytes, total)
                if total > self.limit_bytes and not self._stop.is_set():  # once stopped, its pids may be others'
                    self.tripped = True
                    _kill(pids)
                    return
            if counting and self._disk is not None:
                on_disk = self._counted(self._disk, pids, self.disk_limit_bytes, "files")
                self.disk_peak_bytes = max(self.disk_peak_bytes, on_disk)
                if on_disk > self.disk_limit_bytes and not self._stop.is_set():
                    self.over_disk = True
                    _kill(pids)
                    return
            self._stop.wait(self._interval)

    @staticmethod
    def _counted(count: Callable[[list[int]], int], pids: list[int], limit: int, what: str) -> int:
        """What ``count`` counts; over ``limit`` when it fails (a run that cannot be counted is not let run)."""
        try:
            return count(pids)
        except Exception:
            log.exception("sandbox watchdog: counting the run's %s failed; the run is stopped", what)
            return limit + 1


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class TmpfsInNamespace:
    """The used size of the run's own tmpfs mounts under bubblewrap (its /tmp and work dir), read through a
    member process's root (``/proc/<pid>/root``): those mounts exist only in the run's mount namespace."""

    def __init__(self, mount_points: tuple[str, ...]) -> None:
        self.mount_points = mount_points
        self._own_namespace = _mount_namespace("self")

    def __call__(self, pids: list[int]) -> int:
        for pid in pids:
            namespace = _mount_namespace(str(pid))
            if namespace is None or namespace == self._own_namespace:
                continue  # gone, or bwrap itself (it runs in the worker's namespace)
            total = 0
            try:
                for point in self.mount_points:
                    info = os.statvfs(f"/proc/{pid}/root{point}")
                    total += (info.f_blocks - info.f_bfree) * info.f_frsize
            except OSError:
                continue
            return total
        return 0


def _mount_namespace(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


class RunProcesses:
    """The run's live processes, found cheaply enough to ask 20 times a second.

    A process belongs to the run when its uid is the run's own (a root worker) or, without one, when
    its parent does (bubblewrap's pid namespace keeps orphans inside the tree). Only pids that are new
    since the last look are classified; every ``FULL_RESCAN_EVERY``-th look classifies all of them again,
    so a recycled pid cannot hide for long.
    """

    FULL_RESCAN_EVERY = 20

    def __init__(self, *, root_pid: int, uid: int | None) -> None:
        self.root_pid = root_pid
        self.uid = uid
        self._known: dict[int, bool] = {}
        self._looks = 0

    def __call__(self) -> list[int]:
        self._looks += 1
        if self._looks % self.FULL_RESCAN_EVERY == 0:
            self._known.clear()
        live = [int(n) for n in os.listdir("/proc") if n.isdigit()]
        known: dict[int, bool] = {}
        fresh = []
        for pid in live:
            if pid in self._known:
                known[pid] = self._known[pid]
            else:
                fresh.append(pid)
        if self.uid is not None:
            for pid in fresh:
                known[pid] = pid == self.root_pid or _has_uid(pid, self.uid)
        else:
            parents = {pid: _parent_of(pid) for pid in fresh}
            for pid in fresh:
                known[pid] = pid == self.root_pid
            changed = True
            while changed:  # until no new member: a child may carry a lower pid than its parent (pid wrap)
                changed = False
                for pid, parent in parents.items():
                    if not known[pid] and parent is not None and known.get(parent, False):
                        known[pid] = changed = True
        self._known = known
        return [pid for pid, ours in known.items() if ours]


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def _has_uid(pid: int, uid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            status = fh.read()
    except OSError:
        return False
    start = status.find(b"\nUid:")
    if start < 0:
        return False
    return str(uid).encode() in status[start + 5 : status.find(b"\n", start + 5)].split()[:3]


def resident_bytes(pid: int) -> int:
    """Anonymous plus shared-memory resident bytes of one process (file pages are shared libraries and
    page cache, counted once system-wide, not per fork). A process whose main thread ended while others run
    shows no memory in its own status (its leader is a zombie): it is read from a live thread's, which shares
    the process's memory (counted as nothing, such processes held 1.2 GiB past a 768 MiB limit)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            status = fh.read()
    except OSError:
        return 0
    if b"RssAnon:" not in status:
        status = _a_live_threads_status(pid)
    total = 0
    for key in (b"RssAnon:", b"RssShmem:"):
        start = status.find(key)
        if start >= 0:
            with contextlib.suppress(ValueError, IndexError):
                total += int(status[start + len(key) : status.find(b"\n", start)].split()[0]) * 1024
    return total


def _a_live_threads_status(pid: int) -> bytes:
    """The status of one of ``pid``'s threads that still has its memory ("RssAnon:"), or b"" when none has."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return b""
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status", "rb") as fh:
                status = fh.read()
        except OSError:
            continue
        if b"RssAnon:" in status:
            return status
    return b""


def guard_kind(parent: CgroupParent | None) -> MemoryGuardKind:
    return "cgroup" if parent is not None else "watchdog"
