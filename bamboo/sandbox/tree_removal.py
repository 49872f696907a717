"""Removing a directory tree a sandboxed run wrote, whatever its depth, without following links.

``shutil.rmtree`` calls itself once per directory level: a run that made a tree about a thousand levels deep
(twenty milliseconds of ``mkdir`` and ``chdir``) made it raise ``RecursionError``, which no caller caught, so the
run's files outlived it, its uid stayed leased for the worker's life, and every later start under that uid failed.
Here the walk is a loop with a stack of open directory descriptors, each child opened relative to its parent with
``O_NOFOLLOW`` (a path swapped for a symlink meanwhile is refused, never followed). At most ``MAX_OPEN_LEVELS``
descriptors are held: a directory deeper than that is first moved up into the tree's top directory (a rename
relative to both descriptors) and removed from there, so a tree of any depth needs that many descriptors at most.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass, field

# Directory descriptors one removal holds at most (the worker's own descriptors are limited too).
MAX_OPEN_LEVELS = 32
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Level:
    fd: int
    name: str  # as the directory is named in the level above (the top's name in ``dir_fd``)
    subdirs: list[str] = field(default_factory=list)


def remove_tree(name: str, dir_fd: int | None = None) -> None:
    """Remove the directory ``name`` (relative to ``dir_fd`` when given) and everything under it. Raises OSError
    when something cannot be removed (a mount point, a file a concurrent writer keeps adding to a directory)."""
    top = os.open(name, _OPEN_DIR, dir_fd=dir_fd)
    levels = [_Level(top, name)]
    try:
        levels[0].subdirs = _unlink_files(top)
        while levels:
            level = levels[-1]
            if not level.subdirs:
                levels.pop()
                os.close(level.fd)
                if levels:
                    os.rmdir(level.name, dir_fd=levels[-1].fd)
                continue
            sub = level.subdirs.pop()
            if len(levels) >= MAX_OPEN_LEVELS:  # deep enough: hand it to the top directory
                moved = f".removing-{secrets.token_hex(8)}"
                os.rename(sub, moved, src_dir_fd=level.fd, dst_dir_fd=top)
                levels[0].subdirs.append(moved)
                continue
            try:
                fd = os.open(sub, _OPEN_DIR, dir_fd=level.fd)
            except NotADirectoryError:  # swapped for a file or a link since it was listed: unlinked, not followed
                os.unlink(sub, dir_fd=level.fd)
                continue
            levels.append(_Level(fd, sub))
            levels[-1].subdirs = _unlink_files(fd)
    finally:
        for level in levels:
            with contextlib.suppress(OSError):
                os.close(level.fd)
    os.rmdir(name, dir_fd=dir_fd)


def _unlink_files(fd: int) -> list[str]:
    """Unlink every entry of the directory ``fd`` that is not a directory; the directories' names."""
    subdirs = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode):
                subdirs.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    return subdirs
