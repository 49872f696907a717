"""Populating again costs nothing for what is already learned: an incident whose content a stored
graph was learned from is skipped before any model call and counted `skipped`; only new or changed
files are learned; `relearn` (`bamboo populate --relearn`) learns everything again.

Before the skip a second `bamboo populate` of the same directory redid every model call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import populate, write_incidents
from tests.services import ROOT, worker_env


def _write(d: Path, start: int, n: int) -> None:
    """Email-path incidents: two model calls each (extraction, LLM review)."""
    write_incidents(d, n, prefix="again", first_task=42000000, start=start)


@pytest.mark.parametrize("per_incident", [False, True], ids=["slices", "one-workflow-per-incident"])
async def test_a_second_populate_skips_what_it_learned_and_learns_only_new_files(
        client, running_worker, services, llm_server, tmp_path, per_incident):
    d = tmp_path / "incidents"
    _write(d, 0, 6)
    mode = {"one_workflow_per_incident": per_incident}
    first = await populate(client, d, concurrency=4, **mode)
    assert (first.done, first.skipped, first.failed) == (6, 0, 0), first.failures
    assert llm_server.call_count == 12
    rows = await services.store.knowledge.row_counts()

    again = await populate(client, d, concurrency=4, **mode)
    assert (again.done, again.skipped, again.failed, again.escalated) == (0, 6, 0, 0), again.failures
    assert llm_server.call_count == 12, "a second populate of unchanged files asked the model again"
    assert await services.store.knowledge.row_counts() == rows

    _write(d, 6, 3)  # three new files
    (d / "000.json").write_text((d / "000.json").read_text().replace("resubmitted", "resubmitted twice"))  # one changed
    more = await populate(client, d, concurrency=4, **mode)
    assert (more.done, more.skipped, more.failed) == (4, 5, 0), more.failures
    assert llm_server.call_count == 12 + 2 * 4, "only the new and the changed files are learned"

    relearned = await populate(client, d, concurrency=4, relearn=True, **mode)
    assert (relearned.done, relearned.skipped, relearned.failed) == (9, 0, 0), relearned.failures
    assert llm_server.call_count == 20 + 2 * 9
    assert (await services.store.knowledge.stats()).graphs == 9


def _bamboo(settings, *args) -> subprocess.CompletedProcess:
    env = {**worker_env(settings), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "bamboo.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)


async def test_bamboo_populate_skips_by_default_and_relearn_forces_it(settings, client, running_worker, llm_server,
                                                                      tmp_path):
    import asyncio

    d = tmp_path / "incidents"
    _write(d, 0, 3)
    await populate(client, d, concurrency=2)
    assert llm_server.call_count == 6

    plain = await asyncio.to_thread(_bamboo, settings, "populate", str(d), "--batch-id", "cli-again")
    assert plain.returncode == 0, plain.stderr
    assert "0 stored, 3 skipped" in plain.stdout, plain.stdout
    assert llm_server.call_count == 6

    forced = await asyncio.to_thread(_bamboo, settings, "populate", str(d), "--batch-id", "cli-relearn", "--relearn")
    assert forced.returncode == 0, forced.stderr
    assert "3 stored, 0 skipped" in forced.stdout, forced.stdout
    assert llm_server.call_count == 12


async def test_graphs_learned_under_other_clue_names_are_learned_again(client, running_worker, services,
                                                                     llm_server, tmp_path, monkeypatch):
    """After a change of the routing's clue names, the next populate learns everything again: skipped as
    "already learned", the stored graphs kept clue names that analysis no longer asks for."""
    from bamboo.extraction.panda import routing

    d = tmp_path / "incidents"
    _write(d, 20, 2)
    first = await populate(client, d, concurrency=2)
    assert (first.done, first.skipped) == (2, 0), first.failures
    assert (await populate(client, d, concurrency=2)).skipped == 2
    monkeypatch.setattr(routing, "ROUTING_VERSION", routing.ROUTING_VERSION + 1)
    again = await populate(client, d, concurrency=2)
    assert (again.done, again.skipped, again.failed) == (2, 0, 0), again.failures
