"""The embedded stack's data directory: its owner's alone."""

from __future__ import annotations

import stat

from bamboo.devstack.stack import private_dir


def test_the_data_directory_is_its_owners_alone(tmp_path) -> None:
    """It holds every session's history (the embedded Temporal's database) and the worker's log: created 0755
    with files 0644, a degraded sandbox run, under its own uid, read other sessions' code and results there."""
    said: list[str] = []
    fresh = tmp_path / "fresh" / ".bamboo"
    private_dir(fresh, said.append)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700 and said == []
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    private_dir(shared, said.append)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o700 and len(said) == 1 and "other users" in said[0]
