"""What a degraded run holds in files on memory-backed filesystems counts toward its memory, however deep it
hides them (review finding: the count read 16 directory levels, and 300 MiB written 18 levels down in /dev/shm
passed a 64 MiB limit)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from bamboo.sandbox.leftovers import MAX_DEPTH, OwnedMemoryFiles, mount_of, mounts

SHM = Path("/dev/shm")
MiB = 1024 * 1024


@pytest.fixture
def shm_dir():
    mount = mount_of(str(SHM), mounts()) if SHM.is_dir() else None
    if mount is None or mount.fstype != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    root = SHM / f"bamboo-test-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _hold(root: Path, depth: int) -> None:
    folder = root.joinpath(*[f"d{i}" for i in range(depth)])
    folder.mkdir(parents=True)
    (folder / "blob").write_bytes(os.urandom(MiB))


def test_a_file_near_the_top_is_counted(shm_dir):
    _hold(shm_dir, 2)
    assert MiB <= OwnedMemoryFiles(os.getuid(), [str(shm_dir)])([]) < OwnedMemoryFiles.OVER


def test_a_file_below_the_depth_the_count_reads_is_over_the_limit(shm_dir):
    _hold(shm_dir, MAX_DEPTH + 2)
    assert OwnedMemoryFiles(os.getuid(), [str(shm_dir)])([]) == OwnedMemoryFiles.OVER
