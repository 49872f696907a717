"""What the embedded stack writes that holds session histories, logs or database addresses: its owner's alone."""

from __future__ import annotations

import stat
from pathlib import Path

from bamboo.devstack.stack import keep_private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_histories_logs_and_addresses_are_closed_to_other_users(tmp_path: Path) -> None:
    """The embedded Temporal's database holds every session's code and tool results, the worker's log what it
    ran: created 0644 (in folders 0755), a degraded sandbox run, under its own uid on the host's filesystem,
    read them. The data directory itself stays traversable (embedded Postgres runs as its own user)."""
    (tmp_path / "logs").mkdir(mode=0o755)
    for name in ("temporal.db", "temporal.db-wal", "stack.json", "logs/worker.log"):
        (tmp_path / name).write_text("x")
        (tmp_path / name).chmod(0o644)
    keep_private(tmp_path)
    assert mode(tmp_path / "logs") == 0o700
    assert {mode(tmp_path / n) for n in ("temporal.db", "temporal.db-wal", "stack.json")} == {0o600}
    (tmp_path / "fresh").mkdir()
    keep_private(tmp_path / "fresh")  # a first start: nothing written yet
    assert mode(tmp_path / "fresh" / "logs") == 0o700


def test_the_stack_state_is_written_for_its_owner_alone(tmp_path: Path) -> None:
    """dev down rewrites it (a new file each time): closing it once at start was not enough."""
    from bamboo.stack_state import StackState, save_state, state_path

    save_state(tmp_path, StackState())
    assert mode(state_path(tmp_path)) == 0o600
