"""Runner behaviour that is not an escape attempt: pool, modes, result shape, errors the model sees."""

from __future__ import annotations

import logging

import pytest

from bamboo.sandbox.models import OutputLimits

from bamboo.sandbox.runner import SandboxRunner

from bamboo.sandbox.errors import SandboxUnavailable
from bamboo.sandbox import isolation as isolation_mod
from tests.sandbox.conftest import harness, needs_bwrap, processes_with_marker, unique_limits, wait_until_gone


@needs_bwrap
async def test_warm_pool_serves_runs_and_is_cleaned_up_on_close(worker_secret):
    limits = unique_limits()
    async with harness("bwrap", limits=limits, pool_size=2) as h:
        assert len(processes_with_marker(limits)) >= 2
        pooled = h.runner._pool[0].proc.pid
        with open(f"/proc/{pooled}/environ", "rb") as fh:
            assert fh.read() == b""  # bwrap itself starts with an empty environment
        first = await h.run("return {'n': 1}")
        assert first.status == "ok" and first.warm_start is True
        results = [await h.run(f"return {{'n': {i}}}") for i in range(3)]
        assert [r.return_value["n"] for r in results] == [0, 1, 2]
    assert await wait_until_gone(limits) == []


async def test_degraded_mode_is_announced_in_the_log_and_result(caplog):
    with caplog.at_level(logging.WARNING):
        async with harness("degraded") as h:
            res = await h.run("return {}")
    assert res.isolation == "degraded" and res.warnings
    assert any("DEGRADED" in r.getMessage() for r in caplog.records)


async def test_bwrap_demanded_but_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(isolation_mod, "find_bwrap", lambda: None)
    with pytest.raises(RuntimeError, match="apt-get install -y bubblewrap"):
        SandboxRunner(isolation="bwrap")


@pytest.mark.parametrize("mode", ["auto", "bwrap"])
async def test_missing_bwrap_means_no_sandbox_not_a_silent_degraded_one(monkeypatch, mode):
    monkeypatch.setattr(isolation_mod, "find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable, match="BAMBOO_SANDBOX_ISOLATION=degraded"):
        SandboxRunner(isolation=mode)


@pytest.mark.parametrize("mode", ["auto", "bwrap"])
async def test_a_failed_bwrap_probe_fails_closed(monkeypatch, mode):
    monkeypatch.setattr(isolation_mod, "probe", lambda plan, *_: "bwrap: No permissions to create new namespace")
    with pytest.raises(SandboxUnavailable) as info:
        SandboxRunner(isolation=mode)
    message = str(info.value)
    assert "No permissions to create new namespace" in message and "BAMBOO_SANDBOX_ISOLATION=degraded" in message
    assert "\n" not in message


async def test_degraded_only_when_the_operator_chose_it(monkeypatch):
    monkeypatch.setattr(isolation_mod, "probe", lambda plan, *_: "bwrap: No permissions to create new namespace")
    runner = SandboxRunner(isolation="degraded")
    try:
        assert runner.isolation == "degraded"
        assert any("chosen by the operator" in w for w in runner.warnings)
    finally:
        await runner.close()


def test_missing_interpreter_is_a_clear_error(tmp_path):
    with pytest.raises(SandboxUnavailable, match="not executable"):
        SandboxRunner(python=str(tmp_path / "python3"))


async def test_script_errors_reach_the_model_as_text(bw):
    res = await bw.run("x = 1 +\nreturn {}")
    assert res.status == "error" and "SyntaxError" in res.error
    res = await bw.run("return [1, 2]")
    assert res.status == "error" and "JSON-serialisable dict" in res.error
    res = await bw.run("return {'f': object()}")
    assert res.status == "error" and "not JSON serializable" in res.error
    res = await bw.run("raise ValueError('task 123 has no jobs')")
    assert res.status == "error" and "task 123 has no jobs" in res.error


async def test_no_return_means_an_empty_dict(bw):
    res = await bw.run("print('hello')")
    assert res.status == "ok" and res.return_value == {} and res.stdout.preview == "hello\n"


async def test_oversized_return_value_is_refused():
    async with harness("bwrap" if isolation_mod.find_bwrap() else "degraded",
                       output=OutputLimits(max_return_bytes=2048)) as h:
        res = await h.run("return {'x': 'y' * 5000}")
    assert res.status == "error" and "2048-byte cap" in res.error


async def test_concurrent_tool_calls_from_one_script(bw):
    # Many first calls at once: they must share one bridge connection, not race to open their own.
    code = "import asyncio\nrows = await asyncio.gather(*(tools.get_task(task_id=i) for i in range(40)))\nreturn {'ids': [r['task_id'] for r in rows]}"
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["ids"] == list(range(40))
    assert len(res.calls) == 40 and {c.outcome for c in res.calls} == {"allowed"}


async def test_output_preview_keeps_head_and_tail(bw):
    res = await bw.run("for i in range(3000):\n    print('line', i)")
    assert res.status == "ok"
    assert res.stdout.truncated and res.stdout.preview.startswith("line 0\n")
    assert res.stdout.preview.rstrip().endswith("line 2999") and "bytes omitted" in res.stdout.preview
    assert len(res.stdout.preview.encode()) <= bw.runner.output.preview_bytes + 200


async def test_a_script_that_breaks_its_own_streams_still_returns(bw):
    res = await bw.run("import sys\nprint('before')\nsys.stdout.close()\nreturn {'ok': 1}")
    assert res.status == "ok", res.error
    assert res.return_value == {"ok": 1}


async def test_sys_exit_is_reported_not_hidden(bw):
    res = await bw.run("import sys\nsys.exit(3)")
    assert res.status == "error" and "SystemExit" in res.error


def test_sweeping_a_uid_with_nothing_running_does_not_wait(monkeypatch):
    """Every run's uid is swept at its end, bwrap's too: the sweep waited 10 ms for reaping even when it had found
    nothing to kill, and the warm pool's trivial run went from 1.5x to 3.2x a bare interpreter start."""
    import os
    import subprocess

    from bamboo.sandbox import uids

    waits: list[float] = []
    monkeypatch.setattr(uids.time, "sleep", waits.append)
    assert uids.sweep(64999) and waits == []
    if os.geteuid() == 0:  # a process of the uid is still killed, and its reaping waited for
        child = subprocess.Popen(["sleep", "30"], user=64998)
        try:
            assert uids.sweep(64998) and waits
        finally:
            child.kill()
            child.wait()
