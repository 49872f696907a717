"""Degraded runs are swept in every world-writable directory of the host's writable mounts. Review finding: the
search walked only the first mount of each device, marked seen before it was known to be a directory, so a file
bind mount of the disk (a container's /etc/hosts) listed first hid a world-writable volume of the same disk."""

from __future__ import annotations

import os

import pytest

from bamboo.sandbox import leftovers
from bamboo.sandbox.leftovers import Mount


@pytest.fixture
def disk(tmp_path):
    """On one device: a file (a file bind mount's point), a plain directory and a world-writable volume."""
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    (tmp_path / "plain").mkdir()
    volume = tmp_path / "volume"
    volume.mkdir()
    os.chmod(volume, 0o1777)
    return tmp_path, os.stat(tmp_path).st_dev


@pytest.mark.parametrize("first", ["hosts", "plain"])
def test_a_world_writable_volume_after_another_mount_of_its_disk_is_found(monkeypatch, disk, first):
    base, dev = disk
    table = [Mount(str(base / first), "ext4", dev, True), Mount(str(base / "volume"), "ext4", dev, True)]
    monkeypatch.setattr(leftovers, "mounts", lambda: table)
    assert str(base / "volume") in leftovers._discover(10_000)


def test_a_directory_reached_through_two_mounts_is_walked_once(monkeypatch, disk):
    base, dev = disk
    (base / "volume" / "inner").mkdir()
    os.chmod(base / "volume" / "inner", 0o1777)
    table = [Mount(str(base), "ext4", dev, True), Mount(str(base / "volume"), "ext4", dev, True)]
    monkeypatch.setattr(leftovers, "mounts", lambda: table)
    found = leftovers._discover(10_000)
    assert sorted(found) == sorted({str(base / "volume"), str(base / "volume" / "inner")})
    assert len(found) == len(set(found))
