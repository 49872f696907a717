"""A degraded run is held to a disk cap (review finding F1): it shares the host's filesystems, RLIMIT_FSIZE bounds one
file only, and a loop of preallocated 15 MiB files in /var/tmp took 6 GiB of the host's disk in 22 ms, status ok.

Now the watchdog counts what the run's uid holds in files wherever it can write (the places the sweep after a run
looks: /tmp, /var/tmp, /dev/shm, /run/lock, its work dir), by allocated blocks, and kills the run past
``SandboxLimits.disk_total_bytes``; the sweep then removes the files. Preallocation answers EOPNOTSUPP, so one call
no longer takes gigabytes past RLIMIT_FSIZE before any poll.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from bamboo.sandbox import leftovers
from tests.sandbox.conftest import harness, unique_limits, wait_until_gone

MiB = 1024 * 1024
CAP = 48 * MiB  # the test's cap: small, so the runs stay quick; the default is twice tmpfs_bytes (128 MiB)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="degraded isolation needs a root worker (a uid per run)")

# Writes up to 40 files of 15 MiB (600 MiB, over 12 times the cap) in ``place``, then holds them: a run the guard
# misses returns ok. The work dir is the run's HOME; the folder's path is printed first, for the test.
FILL = """
import os, time
place = {place!r} or os.environ["HOME"]
folder = os.path.join(place, "bamboo-disk-{tag}")
os.mkdir(folder)
print("FOLDER", folder, flush=True)
chunk = b"x" * (15 << 20)
written = 0
for n in range(40):
    fd = os.open(os.path.join(folder, "f%d" % n), os.O_CREAT | os.O_WRONLY, 0o600)
    if {way!r} == "fallocate":
        os.posix_fallocate(fd, 0, 15 << 20)
    else:
        os.write(fd, chunk)
    os.close(fd)
    written += 15
time.sleep(5)  # holding the files: the guard polls many times meanwhile
return {{"written_mib": written}}
"""


def _printed_folder(stdout: str) -> Path:
    line = next(line for line in stdout.splitlines() if line.startswith("FOLDER "))
    return Path(line.split(" ", 1)[1])


@needs_root
@pytest.mark.parametrize("place", ["/var/tmp", ""], ids=["var_tmp", "work_dir"])
@pytest.mark.parametrize("way", ["fallocate", "write"])
async def test_a_run_filling_the_disk_is_stopped_at_the_cap_and_its_files_removed(place: str, way: str) -> None:
    limits = unique_limits(run_disk_bytes=CAP)
    tag = secrets.token_hex(6)
    async with harness("degraded", limits=limits) as h:
        res = await h.run(FILL.format(place=place, tag=tag, way=way), timeout_s=30)
        folder = _printed_folder(res.stdout.preview)
        assert res.status == "disk_limit", (res.status, res.error, res.return_value)
        assert res.return_value is None
        assert res.error is not None and "more than 48 MiB of disk" in res.error and "was killed" in res.error
        assert "delete each file" in res.error  # it says what to do instead
        assert not folder.exists(), f"{folder} was left behind"
    assert await wait_until_gone(limits) == []


@needs_root
async def test_a_run_under_its_cap_is_untouched() -> None:
    """30 MiB held (15 MiB preallocated in /var/tmp, 15 MiB written in its work dir) and 150 MiB of sparse files,
    which hold no blocks, against a 48 MiB cap: the count is by allocated blocks, not sizes."""
    tag = secrets.token_hex(6)
    code = f"""
import os, time
folder = "/var/tmp/bamboo-disk-{tag}"
os.mkdir(folder)
fd = os.open(os.path.join(folder, "reserved"), os.O_CREAT | os.O_WRONLY, 0o600)
os.posix_fallocate(fd, 0, 15 << 20)
os.close(fd)
with open(os.path.join(os.environ["HOME"], "written"), "wb") as fh:
    fh.write(b"x" * (15 << 20))
for n in range(10):
    with open(os.path.join(folder, "sparse%d" % n), "wb") as fh:
        fh.truncate(15 << 20)
time.sleep(1.5)  # several of the guard's polls
held = os.stat(os.path.join(folder, "reserved")).st_blocks * 512
return {{"reserved_mib": held >> 20, "sparse_mib": 10 * 15}}
"""
    limits = unique_limits(run_disk_bytes=CAP)
    async with harness("degraded", limits=limits) as h:
        res = await h.run(code, timeout_s=30)
    assert res.status == "ok", (res.status, res.error)
    assert res.return_value == {"reserved_mib": 15, "sparse_mib": 150}
    assert not Path(f"/var/tmp/bamboo-disk-{tag}").exists()  # swept after the run, as before


@needs_root
async def test_preallocation_answers_eopnotsupp_and_posix_fallocate_still_works() -> None:
    """One fallocate(FALLOC_FL_KEEP_SIZE) or FS_IOC_RESVSP64 took 1 GiB past a 16 MiB RLIMIT_FSIZE in a millisecond,
    before any poll. Refused as a filesystem without preallocation refuses it, so glibc's posix_fallocate writes
    the blocks itself (within RLIMIT_FSIZE, at the speed of writing)."""
    code = """
import ctypes, errno, fcntl, os, struct
libc = ctypes.CDLL(None, use_errno=True)
path = os.path.join(os.environ["HOME"], "f")
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
out = {}
os.posix_fallocate(fd, 0, 1 << 20)
out["posix_fallocate_mib"] = os.fstat(fd).st_blocks * 512 >> 20
rc = libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(1 << 30))  # FALLOC_FL_KEEP_SIZE
out["fallocate"] = "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()]
space = struct.pack("hhqqiI4i", 0, 0, 0, 1 << 30, 0, 0, 0, 0, 0, 0)
for name, command in (("resvsp64", 0x4030582A), ("zero_range", 0x40305839)):
    try:
        fcntl.ioctl(fd, command, space)
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode[exc.errno]
libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p)
rc = libc.ioctl(fd, ctypes.c_ulong((1 << 40) | 0x4030582A), space)  # the kernel ignores the command's upper half
out["resvsp64_upper_bits"] = "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()]
out["held_mib"] = os.fstat(fd).st_blocks * 512 >> 20
return out
"""
    async with harness("degraded") as h:
        res = await h.run(code, timeout_s=20)
    assert res.status == "ok", (res.status, res.error)
    assert res.return_value == {
        "posix_fallocate_mib": 1, "fallocate": "ENOTSUP", "resvsp64": "ENOTSUP", "zero_range": "ENOTSUP",
        "resvsp64_upper_bits": "ENOTSUP", "held_mib": 1,
    }


# -- the count itself, on this process's own files ---------------------------------------------------------------
@pytest.fixture
def scratch() -> Iterator[Path]:
    root = Path("/var/tmp") / f"bamboo-disk-count-{secrets.token_hex(6)}"
    root.mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_count_reads_blocks_on_disk_and_follows_no_symlink(scratch: Path) -> None:
    outside = scratch.parent / f"{scratch.name}-outside"
    outside.write_bytes(b"x" * (8 * MiB))
    try:
        inside = scratch / "inside"
        inside.mkdir()
        (inside / "written").write_bytes(b"x" * (2 * MiB))
        with open(inside / "sparse", "wb") as fh:
            fh.truncate(64 * MiB)
        (inside / "link").symlink_to(outside)  # 8 MiB behind it, not counted
        (scratch / "dirlink").symlink_to(outside.parent, target_is_directory=True)  # nor walked into
        count = leftovers.OwnedFiles(os.getuid(), [str(scratch)])([])
    finally:
        outside.unlink()
    assert 2 * MiB <= count < 3 * MiB


def test_more_entries_than_a_poll_may_read_is_over(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Owned entries past COUNT_MAX_OWNED (a run flooding inodes), others' entries past the walk's budget (the
    shared places filled while the run runs) and mappings past COUNT_MAX_MAPPINGS (processes that map a file page by
    page to slow the count) all stop the count as over the cap, not as a partial sum."""
    for n in range(30):
        (scratch / f"e{n}").touch()
    assert leftovers.OwnedFiles(os.getuid(), [str(scratch)])([os.getpid()]) < leftovers.OwnedFiles.OVER
    monkeypatch.setattr(leftovers, "COUNT_MAX_OWNED", 10)
    assert leftovers.OwnedFiles(os.getuid(), [str(scratch)])([]) == leftovers.OwnedFiles.OVER
    monkeypatch.undo()
    monkeypatch.setattr(leftovers, "SWEEP_MAX_FOREIGN", 10)
    assert leftovers.OwnedFiles(os.getuid() + 12345, [str(scratch)])([]) == leftovers.OwnedFiles.OVER
    monkeypatch.undo()
    monkeypatch.setattr(leftovers, "COUNT_MAX_MAPPINGS", 10)
    assert leftovers.OwnedFiles(os.getuid(), [str(scratch)])([os.getpid()]) == leftovers.OwnedFiles.OVER
