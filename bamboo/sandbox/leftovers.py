"""What a degraded run leaves on the host's filesystems: removed after the run, counted while it runs.

A degraded run shares the host's filesystems. Its uid (leased for the run alone, no supplementary groups) can
create entries only where "other" may write: the world-writable directories — /tmp, /var/tmp, /dev/shm,
/run/lock and whatever else the host has — and the directories it makes there. So:

* after the run, every entry its uid owns under those places is removed (``remove_owned``), before the uid is
  leased again; a file left in /run/lock used to survive and be read by a later run with that uid. And again
  before a run starts: a worker that died mid-run never swept, and the uid comes back to another session. A
  sweep that stops short (more entries of others than it may look at) refuses the run: it cannot say the
  uid is clean;
* while it runs, the bytes its files hold on memory-backed filesystems (tmpfs, ramfs, hugetlbfs) count
  against the run's memory total (``OwnedMemoryFiles``): those pages are in no process's resident set, so
  the RSS watchdog never saw them. Files unlinked but still open or mapped are found through the run's
  processes' descriptors and mappings.

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
COUNT_MAX_OWNED = 20_000  # a run with more files than this on memory is over its total: it cannot be counted cheaply
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
    ``too_deep`` is called for one of them below MAX_DEPTH, which is not entered (what it holds is not seen)."""
    budget = max_foreign
    stack = [(root, 0) for root in roots]
    while stack:
        folder, depth = stack.pop()
        try:
            dir_fd = os.open(folder, OPEN_DIR)
        except OSError:
            continue
        try:
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
                    stack.append((os.path.join(folder, name), depth + 1))
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


# -- counting what a run holds on memory ----------------------------------------------------------------
class OwnedMemoryFiles:
    """Bytes a degraded run's uid holds in files on memory-backed filesystems: the files it owns under the
    world-writable places on such filesystems, and the ones its processes keep open or mapped (unlinked ones
    included). Each file counted once (by device and inode), by its allocated blocks.

    Called from the watchdog's thread with the run's live pids. More than ``COUNT_MAX_OWNED`` files is
    reported as ``OVER``: a run cannot make the count arbitrarily slow; so is a directory of its own deeper than
    the count reads (MAX_DEPTH): 300 MiB written 18 levels down passed a 64 MiB limit uncounted."""

    OVER = 1 << 62

    def __init__(self, uid: int, roots: Iterable[str], extra: Iterable[str] = ()) -> None:
        table = mounts()
        self.uid = uid
        self.devices = frozenset(m.dev for m in table if m.fstype in MEMORY_FILESYSTEMS)
        candidates = [*roots, *extra]
        self.roots = _outermost(tuple(
            p for p in candidates if (m := mount_of(p, table)) is not None and m.fstype in MEMORY_FILESYSTEMS))

    def __call__(self, pids: list[int]) -> int:
        files: dict[tuple[int, int], int] = {}
        owned = 0
        deep = False

        def too_deep() -> None:
            nonlocal deep
            deep = True

        def add(dir_fd: int, name: str, info: os.stat_result) -> None:
            nonlocal owned
            owned += 1
            if stat.S_ISREG(info.st_mode) and info.st_dev in self.devices:
                files[(info.st_dev, info.st_ino)] = info.st_blocks * 512

        if self.roots:
            _walk(self.uid, self.roots, add, max_foreign=SWEEP_MAX_FOREIGN, descend_owned=True, too_deep=too_deep)
        if owned > COUNT_MAX_OWNED or deep:  # files hidden below the depth the count reads are not let pass
            return self.OVER
        for pid in pids:
            for info in _open_and_mapped(pid, self.devices):
                if info.st_uid == self.uid:
                    files[(info.st_dev, info.st_ino)] = info.st_blocks * 512
        return sum(files.values())


def _open_and_mapped(pid: int, devices: frozenset[int]) -> list[os.stat_result]:
    """The files on ``devices`` that process ``pid`` holds open or mapped."""
    found = []
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                info = os.stat(f"/proc/{pid}/fd/{fd}")
                if stat.S_ISREG(info.st_mode) and info.st_dev in devices:
                    found.append(info)
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/maps", "rb") as fh:
            maps = fh.read()
        for line in maps.splitlines():
            fields = line.split(None, 5)
            if len(fields) < 5 or fields[4] == b"0" or _device(fields[3]) not in devices:
                continue
            with contextlib.suppress(OSError):  # map_files gives the mapped file itself, unlinked or not
                found.append(os.stat(f"/proc/{pid}/map_files/{fields[0].decode()}"))
    return found


def _device(field: bytes) -> int | None:
    """``maj:min`` in hex, as /proc/<pid>/maps writes it."""
    major, _, minor = field.partition(b":")
    try:
        return os.makedev(int(major, 16), int(minor, 16))
    except ValueError:
        return None
