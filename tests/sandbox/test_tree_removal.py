"""Removing what a run wrote: any depth without recursion, never through a link, with a bounded number of open
directories (shutil.rmtree recursed once per level, and a run's 1,500-deep tree made it raise RecursionError)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bamboo.sandbox import tree_removal
from bamboo.sandbox.tree_removal import MAX_OPEN_LEVELS, remove_tree


def deep(root: Path, levels: int) -> Path:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):  # by descriptor: the path would be longer than the kernel takes
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("payload", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as fh:
            fh.write("x")
    finally:
        os.close(fd)
    return root


def test_a_tree_deeper_than_the_recursion_limit_is_removed_with_few_descriptors(tmp_path, monkeypatch):
    top = tmp_path / "run"
    top.mkdir()
    deep(top, 3000)
    held, most = set(), [0]
    real_open, real_close = os.open, os.close

    def counting_open(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        held.add(fd)
        most[0] = max(most[0], len(held))
        return fd

    def counting_close(fd):
        held.discard(fd)
        real_close(fd)

    monkeypatch.setattr(tree_removal.os, "open", counting_open)
    monkeypatch.setattr(tree_removal.os, "close", counting_close)
    remove_tree(str(top))
    assert not top.exists()
    assert most[0] <= MAX_OPEN_LEVELS + 1, f"{most[0]} directories held open at once"


def test_links_are_removed_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the run's")
    top = tmp_path / "run"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "to-dir").symlink_to(outside)
    (top / "a" / "b" / "to-file").symlink_to(outside / "keep")
    remove_tree(str(top))
    assert not top.exists() and (outside / "keep").read_text() == "not the run's"
    link = tmp_path / "link"
    link.symlink_to(outside)
    with pytest.raises(OSError):
        remove_tree(str(link))  # the top itself a link: refused, not followed
    assert (outside / "keep").exists()
