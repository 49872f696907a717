"""Issue 28, item 4: the run's memory total counts every page, not only the pages its processes map.

memfds, SysV shared memory and files on memory-backed filesystems (the run's tmpfs under bubblewrap, the host's
/dev/shm in degraded mode) hold memory no process maps; they used to escape the watchdog. Now the calls that
create unbounded unmapped memory are refused, and the watchdog counts what the run holds in files on memory.
"""

from __future__ import annotations

import pytest

from tests.sandbox.conftest import harness, unique_limits, wait_until_gone

MiB = 1024 * 1024

# The attack, scaled down: 4 processes x 8 memfds x 16 MiB (512 MiB) against a 160 MiB total.
MEMFDS = """
import errno, os, time
r, w = os.pipe()
for _ in range(4):
    if os.fork() == 0:
        held, fds, chunk = 0, [], b"x" * (1024 * 1024)
        try:
            for _ in range(8):
                fd = os.memfd_create("hold")
                for _ in range(16):
                    os.write(fd, chunk)
                fds.append(fd)
                held += 16
            note = "ok"
        except OSError as exc:
            note = errno.errorcode.get(exc.errno, str(exc.errno))
        os.write(w, ("%d %s\\n" % (held, note)).encode())
        time.sleep(6)
        os._exit(0)
os.close(w)
with os.fdopen(r) as fh:
    lines = [fh.readline().split() for _ in range(4)]
time.sleep(3)
return {"held_mib": sum(int(n) for n, _ in lines), "notes": sorted({note for _, note in lines})}
"""


async def test_memfds_cannot_hold_memory_past_the_total(mode):
    limits = unique_limits(memory_bytes=256 * MiB, run_memory_bytes=160 * MiB, max_processes=512)
    async with harness(mode, limits=limits) as h:
        res = await h.run(MEMFDS, timeout_s=20)
    assert res.status in ("ok", "memory_limit"), (res.status, res.error)
    if res.status == "ok":
        assert res.return_value["held_mib"] * MiB <= 160 * MiB, res.return_value
        assert res.return_value["notes"] == ["EPERM"], res.return_value
    assert await wait_until_gone(limits) == []


async def test_memfd_create_is_refused(sandbox):
    res = await sandbox.run("""
import errno, os
try:
    os.memfd_create("x")
    return {"memfd": "created"}
except OSError as exc:
    return {"memfd": errno.errorcode[exc.errno]}
""")
    assert res.status == "ok", res.error
    assert res.return_value == {"memfd": "EPERM"}


# Three ways to hold pages in files on memory-backed filesystems, none of them mapped resident: files left
# in place, files unlinked but kept open, files unlinked after mapping them untouched.
HOLD = """
import mmap, os, time
keep = []
held = 0
chunk = b"x" * (1024 * 1024)
for n in range({count}):
    place = {places}[n % {n_places}]
    path = "%s/hold-%d-%d" % (place, os.getpid(), n)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        for _ in range(16):
            os.write(fd, chunk)
    except OSError:
        continue
    held += 16
    if "{way}" == "unlinked_open":
        os.unlink(path)
        keep.append(fd)
    elif "{way}" == "unlinked_mapped":
        keep.append(mmap.mmap(fd, 16 * 1024 * 1024))
        os.close(fd)
        os.unlink(path)
    else:
        os.close(fd)
time.sleep(4)
return {{"held_mib": held}}
"""


@pytest.mark.parametrize("way", ["files", "unlinked_open", "unlinked_mapped"])
async def test_files_on_memory_count_against_the_total(mode, way):
    # bubblewrap: the run's /tmp and work dir are tmpfs (64 MiB each); degraded: the host's /dev/shm.
    places = ["/tmp", "/sandbox"] if mode == "bwrap" else ["/dev/shm"]
    count = 8 if mode == "bwrap" else 10
    limits = unique_limits(memory_bytes=256 * MiB, run_memory_bytes=96 * MiB, tmpfs_bytes=64 * MiB)
    code = HOLD.format(count=count, places=places, n_places=len(places), way=way)
    async with harness(mode, limits=limits) as h:
        res = await h.run(code, timeout_s=20)
    assert res.status == "memory_limit", (res.status, res.error, res.return_value)
    assert "96 MiB" in res.error
    assert await wait_until_gone(limits) == []


async def test_sysv_shared_memory_is_refused(mode):
    """SysV segments live in the host's ipc namespace in degraded mode: unmapped, unbounded by the total, and
    outliving the run. (Under bubblewrap no FFI module loads, so no script can make the call at all; the
    filter's own test checks that bubblewrap's program refuses it too.)"""
    if mode == "bwrap":
        pytest.skip("no FFI module loads under bubblewrap; tests/security/test_seccomp.py runs bwrap's program")
    async with harness(mode) as h:
        res = await h.run("""
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, args in (("shmget", (0, 64 * 1024 * 1024, 0o1600)), ("msgget", (0, 0o1600)), ("semget", (0, 1, 0o1600))):
    ctypes.set_errno(0)
    rc = getattr(libc, name)(*[ctypes.c_long(a) for a in args])
    out[name] = "created" if rc >= 0 else errno.errorcode[ctypes.get_errno()]
return out
""")
    assert res.status == "ok", res.error
    assert res.return_value == {"shmget": "EPERM", "msgget": "EPERM", "semget": "EPERM"}
