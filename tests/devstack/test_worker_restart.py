"""`bamboo dev up` restarts a worker that runs other code than the sources hold.

A worker left running by an earlier `make demo` kept its old contract modules while new workflow runs read the
new workflow modules, and every session's task failed ("module 'bamboo.sandbox.contract' has no attribute
'UsedDecision'") until someone thought of `bamboo dev down`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bamboo.devstack import stack
from bamboo.devstack.code_version import source_fingerprint
from bamboo.settings import Settings
from bamboo.stack_state import ServiceState, StackState


@pytest.fixture
def processes(monkeypatch):
    seen: dict[str, list] = {"stopped": [], "started": []}
    alive = {111}
    monkeypatch.setattr(stack, "pid_alive", lambda pid: pid in alive)
    monkeypatch.setattr(stack, "_terminate", lambda pid, timeout=15: (seen["stopped"].append(pid), alive.discard(pid)))

    def start(settings, state, log):
        seen["started"].append(log)
        alive.add(222)
        return ServiceState(pid=222, log=str(log))

    monkeypatch.setattr(stack, "start_worker", start)
    monkeypatch.setattr(stack, "source_fingerprint", lambda: "sources-now")
    return seen


def test_a_worker_started_from_other_sources_is_restarted(processes, tmp_path) -> None:
    said: list[str] = []
    state = StackState(worker=ServiceState(pid=111, code="sources-before"))
    worker = stack.ensure_worker(Settings(), state, tmp_path / "worker.log", said.append)
    assert processes["stopped"] == [111] and worker.pid == 222 and worker.code == "sources-now"
    assert "the code changed since it started" in said[0]


def test_a_worker_of_these_sources_is_kept_and_a_dead_one_started(processes, tmp_path) -> None:
    state = StackState(worker=ServiceState(pid=111, code="sources-now"))
    assert stack.ensure_worker(Settings(), state, tmp_path / "worker.log", print).pid == 111
    state = StackState(worker=ServiceState(pid=999, code="sources-now"))
    assert stack.ensure_worker(Settings(), state, tmp_path / "worker.log", print).pid == 222
    assert processes["stopped"] == []


def test_the_fingerprint_follows_every_source_change(tmp_path: Path) -> None:
    module = tmp_path / "bamboo" / "contract.py"
    module.parent.mkdir()
    module.write_text("A = 1\n")
    first = source_fingerprint(tmp_path)
    assert source_fingerprint(tmp_path) == first
    os.utime(module, ns=(module.stat().st_atime_ns, module.stat().st_mtime_ns + 1_000_000))
    assert source_fingerprint(tmp_path) != first
    second = source_fingerprint(tmp_path)
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "new.py").write_text("")
    assert source_fingerprint(tmp_path) != second
