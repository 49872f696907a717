"""What a degraded run leaves on the host's filesystems: removed after the run, counted while it runs.

A degraded run shares the host's filesystems. Its uid (leased for the run alone, no supplementary groups) can
create entries only where "other" may write: the world-writable directories — /tmp, /var/tmp, /dev/shm,
/run/lock and whatever else the host has — and the directories it makes there. So:

* after the run, every entry its uid owns under those places is removed (``remove_owned``), before the uid is
  leased again; a file left in /run/lock used to survive and be read by a later run with that uid. And again
  before a run starts: a worker that died mid-run never swept, and the uid comes back to another session. A
  sweep that stops short (more entries of others than it may look at) refuses the run: it cannot say the
  uid is clean;
* while it runs, the bytes its files hold count (``OwnedFiles``): on every filesystem against its disk cap
  (``SandboxLimits.disk_total_bytes``: RLIMIT_FSIZE bounds one file, and a loop of 15 MiB files took 6 GiB of the
  host's disk in 22 ms), and on memory-backed ones (tmpfs, ramfs, hugetlbfs) against its memory total too
  (``OwnedMemoryFiles``): those pages are in no process's resident set, so the RSS watchdog never saw them.
  Files unlinked but still open or mapped are found through the run's processes' descriptors and mappings.

Finding the world-writable directories means walking the host's writable local filesystems once
(``world_writable_dirs``): bounded in entries and depth, run off the event loop, remembered for
``DISCOVERY_TTL_S``. A directory "other" cannot search is not entered (the run could not reach below it
either). Pseudo, network and FUSE filesystems are not walked: a deployment that mounts a world-writable
network share on a degraded host must not count on this sweep.

Every removal is made relative to a directory descriptor after an ``lstat`` through the same descriptor, and
directories are removed with ``tree_removal.remove_tree``'s descriptor-based walk (any depth, no recursion), so a
concurrent run that swaps a path for a symlink cannot turn the sweep against a file the dead run's uid does not own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bamboo.sandbox.tree_removal import remove_tree

log = logging.getLogger(__name__)

FIXED_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "hugetlbfs"})
NOT_WALKED = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs", "securityfs", "pstore", "bpf",
    "configfs", "fusectl", "autofs", "binfmt_misc", "nsfs", "efivarfs", "selinuxfs", "rpc_pipefs", "nfsd",
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "afs", "9p", "virtiofs",
})
DISCOVERY_MAX_ENTRIES = 400_000
DISCOVERY_TTL_S = 600.0
MAX_DEPTH = 16
SWEEP_MAX_FOREIGN = 50_000  # others' entries looked at per sweep (the run's own are removed whatever their number)
COUNT_MAX_OWNED = 20_000  # a run with more entries than this is over its totals: it cannot be counted cheaply
# Lines of the run's processes' /proc/<pid>/maps read per count: a process may make 65,530 mappings and 128 processes,
# and a count slowed to seconds let a run write for seconds before it was stopped. A stdlib Python maps ~100.
COUNT_MAX_MAPPINGS = 50_000
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    dev: int
    writable: bool


def mounts() -> list[Mount]:
    """The mounts this process sees, from /proc/self/mountinfo (mount points unescaped)."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) < 6 or not right:
                continue
            major, _, minor = fields[2].partition(":")
            found.append(Mount(point=_unescape(fields[4]), fstype=right.split()[0],
                               dev=os.makedev(int(major), int(minor)), writable="ro" not in fields[5].split(",")))
    return found


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in a mount point as octal escapes."""
    if "\\" not in field:
        return field
    return field.encode("latin-1", "surrogateescape").decode("unicode_escape").encode("latin-1").decode(
        "utf-8", "surrogateescape")


def mount_of(path: str, table: Iterable[Mount]) -> Mount | None:
    """The mount ``path`` lies on (the longest mount point that is a prefix of it; the last one mounted wins)."""
    best: Mount | None = None
    for mount in table:
        point = mount.point.rstrip("/") or "/"
        inside = path == point or path.startswith(point if point.endswith("/") else point + "/")
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return best


# -- discovery ---------------------------------------------------------------------------------------
_cache_lock = threading.Lock()
_cache: tuple[float, tuple[str, ...]] | None = None


def world_writable_dirs(*, max_entries: int = DISCOVERY_MAX_ENTRIES, refresh: bool = False) -> tuple[str, ...]:
    """Every place a degraded run's uid may create entries: the fixed ones that exist, and every directory with
    write and search for "other" on a writable local filesystem. Remembered for ``DISCOVERY_TTL_S``."""
    global _cache
    with _cache_lock:
        if not refresh and _cache is not None and time.monotonic() - _cache[0] < DISCOVERY_TTL_S:
            return _cache[1]
        found = _discover(max_entries)
        roots = _outermost(tuple(p for p in FIXED_ROOTS if os.path.isdir(p)) + found)
        _cache = (time.monotonic(), roots)
        return roots


def sweep_roots(*extra: str) -> tuple[str, ...]:
    """Where a degraded run's uid may have left entries: the world-writable places, and ``extra``, the temp directory
    its work dir was made in (``tempfile.gettempdir()``), which need not be world-writable.

    That work dir is the run's own (chowned to its uid), so a worker killed before it removed it left it owned by
    the uid; outside a world-writable place no sweep reached it, and the next run leased that uid read it."""
    return _outermost(world_writable_dirs() + tuple(os.path.realpath(p) for p in extra))


def _discover(max_entries: int) -> tuple[str, ...]:
    """World-writable directories on the host's writable mounts. Directories are told apart by device and inode,
    not mounts by device: a device mounted more than once (a file bind mount such as a container's /etc/hosts,
    a bind-mounted subdirectory, a volume of the same disk) had only its first mount walked, so a world-writable
    volume listed after a file mount of its disk was never swept."""
    found: list[str] = []
    visited: set[tuple[int, int]] = set()
    budget = max_entries
    for mount in mounts():
        if not mount.writable or mount.fstype in NOT_WALKED or mount.fstype.startswith("fuse"):
            continue
        try:
            top = os.lstat(mount.point)
        except OSError:
            continue
        if not stat.S_ISDIR(top.st_mode) or not top.st_mode & 0o001 or (top.st_dev, top.st_ino) in visited:
            continue
        visited.add((top.st_dev, top.st_ino))
        if top.st_mode & 0o002:
            found.append(mount.point)
        stack = [(mount.point, 0)]
        while stack and budget > 0:
            folder, depth = stack.pop()
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        budget -= 1
                        with contextlib.suppress(OSError):
                            if not entry.is_dir(follow_symlinks=False):
                                continue
                            info = entry.stat(follow_symlinks=False)
                            if info.st_dev != top.st_dev or not info.st_mode & 0o001:
                                continue  # another filesystem (walked on its own), or not searchable by others
                            if (info.st_dev, info.st_ino) in visited:
                                continue  # reached already through another mount of this device
                            visited.add((info.st_dev, info.st_ino))
                            if info.st_mode & 0o002:
                                found.append(entry.path)
                            if depth < MAX_DEPTH:
                                stack.append((entry.path, depth + 1))
            except OSError:
                continue
        if budget <= 0:
            log.warning("the degraded sandbox's search for world-writable directories stopped after %d entries; "
                        "runs are swept in the ones found so far and in %s", max_entries, ", ".join(FIXED_ROOTS))
            break
    return tuple(found)


def _outermost(paths: tuple[str, ...]) -> tuple[str, ...]:
    """Drop every path inside another one (a walk of the outer one reaches it)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return tuple(kept)


# -- the walk ------------------------------------------------------------------------------------------
Visit = Callable[[int, str, os.stat_result], None]


def _walk(uid: int, roots: Iterable[str], owned: Visit, *, max_foreign: int, descend_owned: bool = False,
          too_deep: Callable[[], None] | None = None) -> bool:
    """Call ``owned(dir_fd, name, lstat)`` for every entry ``uid`` owns under ``roots``; False when the walk
    stopped early because it looked at ``max_foreign`` entries of others.

    Others' directories are entered when "other" may search them (a world-writable one may sit below);
    ``uid``'s own are entered only when ``descend_owned`` (the sweep removes them whole instead), and
    ``too_deep`` is called for one of them below MAX_DEPTH, which is not entered (what it holds is not seen).

    No symlink is followed: entries are looked at with ``lstat``, a directory is opened with O_NOFOLLOW and entered
    only when it is still the directory its ``lstat`` found (a parent swapped for a symlink meanwhile would lead
    the path elsewhere)."""
    budget = max_foreign
    stack: list[tuple[str, int, tuple[int, int] | None]] = [(root, 0, None) for root in roots]
    while stack:
        folder, depth, expected = stack.pop()
        try:
            dir_fd = os.open(folder, OPEN_DIR)
        except OSError:
            continue
        try:
            if expected is not None:
                opened = os.fstat(dir_fd)
                if (opened.st_dev, opened.st_ino) != expected:
                    continue
            with os.scandir(dir_fd) as entries:
                names = [entry.name for entry in entries]
            for name in names:
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                is_dir = stat.S_ISDIR(info.st_mode)
                if info.st_uid == uid:
                    owned(dir_fd, name, info)
                    if not (is_dir and descend_owned):
                        continue
                else:
                    budget -= 1
                    if budget < 0:
                        return False
                    if not is_dir or not info.st_mode & 0o001:
                        continue
                if depth < MAX_DEPTH:
                    stack.append((os.path.join(folder, name), depth + 1, (info.st_dev, info.st_ino)))
                elif info.st_uid == uid and too_deep is not None:
                    too_deep()
        except OSError:
            pass
        finally:
            os.close(dir_fd)
    return True


def remove_owned(uid: int, roots: Iterable[str], *, max_foreign: int | None = None) -> bool:
    """Remove everything ``uid`` owns under ``roots`` (its processes are dead by now); False when the walk stopped
    after ``max_foreign`` (SWEEP_MAX_FOREIGN) entries of others, so some may be left: the host's shared places
    are that full, or a concurrent run filled them to make this sweep stop short."""

    def remove(dir_fd: int, name: str, info: os.stat_result) -> None:
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(info.st_mode):
                remove_tree(name, dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)

    roots = tuple(roots)
    budget = SWEEP_MAX_FOREIGN if max_foreign is None else max_foreign
    if _walk(uid, roots, remove, max_foreign=budget):
        return True
    log.warning("the sweep of uid %d's files looked at %d entries of others and stopped; some may be left in %s",
                uid, budget, ", ".join(roots))
    return False


# -- counting what a run holds ------------------------------------------------------------------------
class _Uncountable(Exception):
    """The count stopped: the run holds more entries, or deeper ones, than a poll may read."""


class OwnedFiles:
    """Bytes a degraded run's uid holds in files: the entries it owns under ``roots`` (the places it can write, as
    ``sweep_roots`` names them), and the files its processes keep open or mapped (unlinked ones included). Each
    file counted once (by device and inode), by its allocated blocks, not its size: a sparse file holds what it
    wrote, a preallocated one all it reserved. On every filesystem, or with ``memory_only`` on memory-backed ones.

    Called from the watchdog's thread with the run's live pids, every few polls, so its work is bounded, and a
    count that would pass the bound is ``OVER``: more than ``COUNT_MAX_OWNED`` entries of the run's own (a run
    cannot make the count arbitrarily slow, nor take the host's inodes), a directory of its own deeper than the count
    reads (MAX_DEPTH: 300 MiB written 18 levels down passed a 64 MiB limit uncounted), more than
    ``COUNT_MAX_MAPPINGS`` mappings of its processes, or more than ``SWEEP_MAX_FOREIGN`` entries of others looked
    at. The last is over the cap rather than a reason to count again: other runs can make those entries, and runs
    that filled the shared places together would otherwise leave each other's files uncounted for ever; and a host
    that holds that many before a run starts refuses the run (``remove_owned``), so a run stopped this way saw the
    places filled while it ran.

    Entries are looked at with ``lstat`` and directories opened with O_NOFOLLOW (``_walk``): a symlink is counted as
    itself, never followed. The walk is a snapshot, not atomic: a run renaming its files while it is read can
    keep them out of one count, not out of every one."""

    OVER = 1 << 62

    def __init__(self, uid: int, roots: Iterable[str], extra: Iterable[str] = (), *, memory_only: bool = False) -> None:
        table = mounts()
        self.uid = uid
        memory = frozenset(m.dev for m in table if m.fstype in MEMORY_FILESYSTEMS)
        self.devices: frozenset[int] | None = memory if memory_only else None
        candidates = (*roots, *extra)
        self.roots = _outermost(tuple(
            p for p in candidates
            if not memory_only or ((m := mount_of(p, table)) is not None and m.fstype in MEMORY_FILESYSTEMS)))

    def _counts(self, device: int) -> bool:
        return self.devices is None or device in self.devices

    def __call__(self, pids: list[int]) -> int:
        files: dict[tuple[int, int], int] = {}
        owned = 0

        def too_deep() -> None:
            raise _Uncountable

        def add(dir_fd: int, name: str, info: os.stat_result) -> None:
            nonlocal owned
            owned += 1
            if owned > COUNT_MAX_OWNED:
                raise _Uncountable
            if stat.S_ISREG(info.st_mode) and self._counts(info.st_dev):
                files[(info.st_dev, info.st_ino)] = info.st_blocks * 512

        if self.roots:
            try:
                complete = _walk(self.uid, self.roots, add, max_foreign=SWEEP_MAX_FOREIGN, descend_owned=True,
                                 too_deep=too_deep)
            except _Uncountable:
                return self.OVER
            if not complete:
                log.warning("counting uid %d's files looked at %d entries of others and stopped; the run is stopped",
                            self.uid, SWEEP_MAX_FOREIGN)
                return self.OVER
        looked: set[bytes] = set()
        mappings = 0
        for pid in pids:
            found, lines = _open_and_mapped(pid, self.devices, looked, COUNT_MAX_MAPPINGS - mappings)
            mappings += lines
            if mappings > COUNT_MAX_MAPPINGS:
                return self.OVER
            for info in found:
                if info.st_uid == self.uid:
                    files[(info.st_dev, info.st_ino)] = info.st_blocks * 512
        return sum(files.values())


class OwnedMemoryFiles(OwnedFiles):
    """What a degraded run's uid holds in files on memory-backed filesystems: it counts against the memory total."""

    def __init__(self, uid: int, roots: Iterable[str], extra: Iterable[str] = ()) -> None:
        super().__init__(uid, roots, extra, memory_only=True)


def _open_and_mapped(pid: int, devices: frozenset[int] | None, looked: set[bytes],
                     allowance: int) -> tuple[list[os.stat_result], int]:
    """The regular files on ``devices`` (None: on any) that process ``pid`` holds open or mapped, and how many
    mappings it has; more than ``allowance`` are not read. A mapping whose device and inode are in ``looked`` is not
    looked at again: every process maps the interpreter's libraries, each in several pieces, and on every filesystem
    that was a stat per piece, per process, per count."""
    found = []
    lines: list[bytes] = []
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                info = os.stat(f"/proc/{pid}/fd/{fd}")
                if stat.S_ISREG(info.st_mode) and (devices is None or info.st_dev in devices):
                    found.append(info)
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/maps", "rb") as fh:
            lines = fh.read().splitlines()
        for line in lines if len(lines) <= allowance else ():
            fields = line.split(None, 5)
            if len(fields) < 5 or fields[4] == b"0":
                continue
            if devices is not None and _device(fields[3]) not in devices:
                continue
            key = fields[3] + b" " + fields[4]
            if key in looked:
                continue
            looked.add(key)
            with contextlib.suppress(OSError):  # map_files gives the mapped file itself, unlinked or not
                found.append(os.stat(f"/proc/{pid}/map_files/{fields[0].decode()}"))
    return found, len(lines)


def _device(field: bytes) -> int | None:
    """``maj:min`` in hex, as /proc/<pid>/maps writes it."""
    major, _, minor = field.partition(b":")
    try:
        return os.makedev(int(major, 16), int(minor, 16))
    except ValueError:
        return None
