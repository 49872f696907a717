"""Item: degraded mode (no bwrap) fails closed, refuses what it cannot contain, and gives every run a uid
of its own whose whole process tree dies with the run. Each attack runs in both modes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.sandbox import SandboxActivities
from bamboo.sandbox.contract import SANDBOX_REFUSED, ExecuteCodeInput
from bamboo.audit import MemoryAuditSink, MemoryBlobSink
from bamboo.sandbox.errors import SandboxRefused, SandboxUnavailable
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox import isolation as isolation_mod
from tests.sandbox.conftest import MemoryToolCaller, harness, processes_with_marker, unique_limits, wait_until_gone


def _uid_of(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _alive(pid: int) -> bool:
    """Whether any thread of ``pid`` still runs: a process whose main thread ended shows as a zombie while its
    other threads run on."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            state = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            return True
    return False


def daemon_run(marker: str, on_each_pid: str, pause_s: float = 0.0) -> str:
    """Code for a run that leaves a daemon (setsid, a double fork, re-executed with an empty environment, its
    command line carrying ``marker``) which for 20 s runs ``on_each_pid`` on every other process it can see."""
    action = "\n".join("                " + line for line in on_each_pid.splitlines())
    return f"""
import os, sys, time
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # the sandbox's filter refuses it: the daemon stays in the run's group
        pass
    if os.fork() == 0:
        os.chdir("/")
        os.execve(sys.executable, [sys.executable, "-I", "-S", "-c", '''
import os, time  # {marker}
end = time.time() + 20
while time.time() < end:
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
{action}
            except OSError:
                pass
    time.sleep({pause_s})
'''], {{}})
    os._exit(0)
time.sleep(0.5)
return {{}}
"""


def _pids_with(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


# --- fail closed -----------------------------------------------------------------------------------
@pytest.mark.parametrize("isolation", ["auto", "bwrap"])
def test_a_failed_probe_leaves_no_sandbox_unless_degraded_was_chosen(monkeypatch, isolation):
    monkeypatch.setattr(isolation_mod, "probe", lambda plan, *_: "bwrap: setting up uid map: Permission denied")
    with pytest.raises(SandboxUnavailable, match="BAMBOO_SANDBOX_ISOLATION=degraded"):
        SandboxRunner(isolation=isolation)


async def test_unattended_runs_are_refused_only_when_degraded(sandbox, mode):
    if mode == "bwrap":
        res = await sandbox.run("return {'ran': True}", phase="automatic")
        assert res.return_value == {"ran": True}
        return
    with pytest.raises(SandboxRefused, match="unattended"):
        await sandbox.run("return {'ran': True}", phase="automatic")


async def test_state_changing_tools_are_refused_only_when_degraded(sandbox, mode):
    code = "await tools.kill_task(task_id=5)\nreturn {'killed': True}"
    if mode == "bwrap":
        res = await sandbox.run(code, allowed={"get_task", "kill_task"})
        assert res.status == "ok" and sandbox.caller.dispatched("kill_task") == 1
        return
    with pytest.raises(SandboxRefused, match="kill_task"):
        await sandbox.run(code, allowed={"get_task", "kill_task"})
    assert sandbox.caller.calls == []


async def test_the_activity_refuses_without_a_retry(mode):
    async with harness(mode) as h:
        acts = SandboxActivities(runner=h.runner, caller=MemoryToolCaller(), audit=MemoryAuditSink(), blobs=MemoryBlobSink())
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=5))
        unattended = ExecuteCodeInput(run_id="auto-1", code="return {}", allowed_tools=["get_task"])  # phase defaults to automatic
        if mode == "bwrap":
            assert (await env.run(acts.execute_code, unattended)).status == "ok"
            return
        with pytest.raises(ApplicationError) as info:
            await env.run(acts.execute_code, unattended)
        assert info.value.type == SANDBOX_REFUSED and info.value.non_retryable


async def test_state_changing_tool_is_refused_at_the_bridge_too(mode):
    """Belt and braces: even a bridge built for a degraded run with kill_task allowed never dispatches it."""
    from bamboo.sandbox.bridge import ToolBridge
    from tests.sandbox.conftest import SPECS

    caller = MemoryToolCaller()
    bridge = ToolBridge(run_id="r", caller=caller, specs=SPECS, allowed=frozenset({"kill_task"}),
                        audit=MemoryAuditSink(), refuse_state_changing=mode == "degraded")
    reply = await bridge.handle_call({"type": "call", "token": bridge.token, "id": 1, "tool": "kill_task",
                                      "args": {"task_id": 1}})
    if mode == "degraded":
        assert reply["denied"] and caller.calls == [] and bridge.calls[0].reason == "degraded_isolation"
        assert [s.name for s in bridge.bridged_specs] == []
    else:
        assert reply["ok"] and caller.dispatched("kill_task") == 1


# --- a uid per run ---------------------------------------------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per run needs a root worker")
async def test_every_run_has_a_uid_of_its_own(mode):
    limits = unique_limits()
    async with harness(mode, limits=limits) as h:
        runs = [asyncio.create_task(h.run("import time\ntime.sleep(4)\nreturn {}")) for _ in range(3)]
        uids: set[int | None] = set()
        for _ in range(60):  # until all three run at once (a loaded machine starts them later than an idle one)
            await asyncio.sleep(0.1)
            uids = {_uid_of(pid) for pid in processes_with_marker(limits)} - {None}
            if len(uids) >= 3:
                break
        results = await asyncio.gather(*runs)
    assert all(r.status == "ok" for r in results)
    assert len(uids) == 3 and all(uid >= 1_000_000_000 for uid in uids)


async def test_one_run_cannot_kill_another_runs_child(mode):
    marker = f"victim-{secrets.token_hex(6)}"
    limits = unique_limits(max_processes=512)
    async with harness(mode, limits=limits) as h:
        victim_code = f"""
import os, sys, time
if os.fork() == 0:
    os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", "import time; time.sleep(30)  # {marker}"])
time.sleep(6)
return {{}}
"""
        victim = asyncio.create_task(h.run(victim_code, timeout_s=15))
        for _ in range(100):
            pids = _pids_with(marker)
            if pids:
                break
            await asyncio.sleep(0.05)
        [target] = pids
        attack = await h.run(f"""
import os, signal
try:
    os.kill({target}, signal.SIGKILL)
    return {{"killed": True}}
except OSError as exc:
    return {{"killed": False, "error": type(exc).__name__}}
""")
        assert attack.status == "ok", attack.error
        assert attack.return_value["killed"] is False
        # bwrap: not even visible from another pid namespace; degraded: another uid's process
        assert attack.return_value["error"] == ("ProcessLookupError" if mode == "bwrap" else "PermissionError")
        assert _alive(target)
        assert (await victim).status == "ok"
    assert not _alive(target)


# --- nothing outlives the run --------------------------------------------------------------------
async def test_a_daemon_that_reexecs_with_a_clean_environment_and_leaves_the_work_dir_dies(mode):
    marker = f"daemon-{secrets.token_hex(6)}"
    limits = unique_limits(max_processes=512)
    async with harness(mode, limits=limits) as h:
        code = f"""
import os, sys, time
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # the sandbox's filter refuses it: the daemon stays in the run's group
        pass
    if os.fork() == 0:
        os.chdir("/")
        os.execve(sys.executable, [sys.executable, "-I", "-S", "-c", "import time; time.sleep(60)  # {marker}"], {{}})
    os._exit(0)
time.sleep(0.5)
return {{"daemonised": True}}
"""
        res = await h.run(code)
        assert res.status == "ok", res.error
        assert await wait_until_gone(limits) == []
        for _ in range(100):
            if not any(_alive(p) for p in _pids_with(marker)):
                break
            await asyncio.sleep(0.05)
        assert not any(_alive(p) for p in _pids_with(marker))


async def test_a_daemon_left_by_one_run_cannot_act_in_the_next(mode):
    """The attack: a daemon survives run A, waits for run B's child, steals its bridge (ptrace, /proc/<pid>/mem,
    pidfd_getfd) and calls kill_task with B's token. It dies with A, and B never calls kill_task."""
    marker = f"lurker-{secrets.token_hex(6)}"
    limits = unique_limits(max_processes=512)
    async with harness(mode, limits=limits) as h:
        lurker = daemon_run(marker, 'open("/proc/%s/mem" % pid, "rb").close()\nopen("/proc/%s/environ" % pid, "rb").read()',
                            pause_s=0.05)
        first = await h.run(lurker)
        assert first.status == "ok", first.error
        assert not any(_alive(p) for p in _pids_with(marker))
        allowed = {"get_task"} | ({"kill_task"} if mode == "bwrap" else set())
        second = await h.run("import time\nt = await tools.get_task(task_id=1)\ntime.sleep(1)\nreturn {'s': t['status']}",
                             allowed=allowed)
        assert second.status == "ok", second.error
        assert h.caller.dispatched("kill_task") == 0
        assert [c.tool for c in second.calls] == ["get_task"]


# --- the host around the run ---------------------------------------------------------------------
async def test_worker_private_files_are_unreadable(sandbox, tmp_path):
    """Files the worker keeps to itself (a checkout's .env or the Temporal database with owner-only modes)."""
    secret_dir = tmp_path / "checkout"
    secret_dir.mkdir(mode=0o700)
    env_file = secret_dir / ".env"
    env_file.write_text("BAMBOO_LLM_API_KEY=canary-" + secrets.token_hex(8))
    env_file.chmod(0o600)
    db = tmp_path / "temporal.db"
    db.write_bytes(b"SQLite format 3\x00")
    db.chmod(0o600)
    res = await sandbox.run(f"""
out = {{}}
for path in ({str(env_file)!r}, {str(db)!r}, "/proc/{os.getpid()}/environ", "/proc/{os.getpid()}/mem"):
    try:
        open(path, "rb").read(16)
        out[path] = "read"
    except OSError as exc:
        out[path] = type(exc).__name__
return out
""")
    assert res.status == "ok", res.error
    assert "read" not in res.return_value.values()


async def test_writes_to_the_shared_tmp_and_shm_do_not_outlive_the_run(sandbox):
    name = f"bamboo-escape-{secrets.token_hex(6)}"
    res = await sandbox.run(f"""
out = {{}}
for folder in ("/tmp", "/dev/shm", "/var/tmp"):
    try:
        with open(folder + "/{name}", "w") as fh:
            fh.write("x")
        out[folder] = "written"
    except OSError as exc:
        out[folder] = type(exc).__name__
return out
""")
    assert res.status == "ok", res.error
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):
        assert not Path(folder, name).exists(), folder


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per run needs a root worker")
async def test_files_a_crashed_workers_run_left_are_gone_before_its_uid_runs_again(mode):
    """The attack: a worker dies mid-run, so the sweep after the run never happens; what that run wrote to the
    shared world-writable places (a session's tool output, a planted script) waits for the next run leased the
    same uid, of another session. Before a degraded run starts, its uid's files are removed; with bubblewrap the
    run sees none of the host's shared places at all."""
    uid = 1_600_000_000 + secrets.randbelow(1_000_000)
    name = f"bamboo-left-{secrets.token_hex(6)}"
    planted = [Path(folder, name) for folder in ("/dev/shm", "/var/tmp", "/run/lock")]
    for path in planted:
        path.write_text("another session's tool output")
        os.chown(path, uid, uid)
        path.chmod(0o600)
    try:
        async with harness(mode, uid_first=uid, uid_count=1) as h:  # the one uid the dead worker's run had
            res = await h.run(f"""
import os
out = {{}}
for path in {[str(p) for p in planted]!r}:
    try:
        out[path] = open(path).read()
    except OSError as exc:
        out[path] = type(exc).__name__
return out
""")
        assert res.status == "ok", res.error
        assert not [p for p, v in res.return_value.items() if "session" in v], res.return_value
        if mode == "degraded":
            assert not [p for p in planted if p.exists()]
    finally:
        for path in planted:
            path.unlink(missing_ok=True)


async def test_a_daemon_that_kills_every_other_process_of_its_uid_still_dies_with_the_run(mode):
    """The attack: the run leaves a daemon (setsid, double fork) that SIGKILLs every other process of its uid. The
    sweep used to run a helper as that uid, without seccomp or no_new_privs: the daemon killed every helper and
    outlived the run, or could stop one and write code into it through /proc/<pid>/mem to leave the sandbox. The
    sweep is now the worker's own, and nothing runs as the run's uid but the run."""
    marker = f"assassin-{secrets.token_hex(6)}"
    limits = unique_limits(max_processes=512)
    async with harness(mode, limits=limits) as h:
        res = await h.run(daemon_run(marker, "os.kill(int(pid), 9)"))
        assert res.status in ("ok", "crashed", "timeout")  # it kills the run's own process too, whatever comes first
        await asyncio.sleep(0.3)
        assert not any(_alive(p) for p in _pids_with(marker))
    await asyncio.sleep(0.3)
    assert not any(_alive(p) for p in _pids_with(marker))


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per run needs a root worker")
@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfds", "a-kernel-without-pidfds"])
def test_the_sweep_runs_nothing_as_the_runs_uid_and_stops_what_forks(monkeypatch, pidfds):
    """The sweep is the worker's own: a helper started as the run's uid (as it was) has neither the seccomp filter
    nor no_new_privs, and a process the run left can stop it and write code into it through /proc/<pid>/mem. A
    process that forks as fast as it can is stopped, then killed, with its children; on a kernel without pidfds
    (before Linux 5.3, where pidfd_open answers ENOSYS) too, by pid."""
    import errno
    import subprocess

    from bamboo.sandbox import uids

    if not pidfds:
        def no_pidfds(pid):
            raise OSError(errno.ENOSYS, "Function not implemented")

        monkeypatch.setattr(uids.os, "pidfd_open", no_pidfds)

    started: list = []
    real_run, real_popen = subprocess.run, subprocess.Popen
    uid = 1_700_000_000 + secrets.randbelow(1_000_000)
    forker = real_popen(["/usr/bin/python3", "-I", "-S", "-c",
                         "import os\nwhile True:\n    try:\n        os.fork() or os._exit(0)\n    except OSError:\n        pass\n"],
                        user=uid, group=uid, extra_groups=[], env={}, cwd="/", start_new_session=True)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: started.append(a) or real_run(*a, **k))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or real_popen(*a, **k))
    try:
        assert uids.processes_of(uid)
        assert uids.sweep(uid) and uids.processes_of(uid) == []
        assert started == [], "the sweep started a process"
    finally:
        forker.kill()
        forker.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per run needs a root worker")
async def test_a_sweep_made_to_stop_short_refuses_the_run_instead_of_handing_out_a_uid_not_known_clean(monkeypatch):
    """The attack: a concurrent run fills /var/tmp (walked before /tmp) with more entries than the sweep may look
    at, so the sweep of another uid stops before it reaches what that uid's earlier run left in /tmp, and the next
    run of that uid reads it. A sweep that stops short now refuses the run."""
    from bamboo.sandbox import leftovers

    monkeypatch.setattr(leftovers, "SWEEP_MAX_FOREIGN", 20)
    uid = 1_800_000_000 + secrets.randbelow(1_000_000)
    name = f"bamboo-flood-{secrets.token_hex(6)}"
    flood = [Path("/var/tmp", f"{name}-{i}") for i in range(40)]
    planted = Path("/tmp", name)
    for path in flood:
        path.touch()
    planted.write_text("another session's tool output")
    os.chown(planted, uid, uid)
    planted.chmod(0o600)
    try:
        async with harness("degraded", uid_first=uid, uid_count=1) as h:
            with pytest.raises(SandboxUnavailable, match="cannot check the shared places"):
                await h.run(f"return {{'read': open({str(planted)!r}).read()}}")
    finally:
        planted.unlink(missing_ok=True)
        for path in flood:
            path.unlink(missing_ok=True)


# A daemon whose main thread ends with a raw exit while another thread runs on: /proc shows the process as a
# zombie ("State: Z"), so a sweep that took every zombie for dead left it running (review finding: it outlived
# the run and read a later run's memory, bridge token included, through /proc/<pid>/mem). Degraded only:
# bwrap's Python has no ctypes, and the pid namespace ends such a process with the run anyway.
ZOMBIE_LEADER = """
import ctypes, os, threading, time
r, w = os.pipe()
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # the sandbox's filter refuses it: the daemon stays in the run's group
        pass
    threading.Thread(target=lambda: [time.sleep(0.2) for _ in range(600)], daemon=False).start()
    os.write(w, str(os.getpid()).encode())
    ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: ends the calling thread only
pid = int(os.read(r, 32))
time.sleep(0.5)
return {"pid": pid}
"""


async def test_a_daemon_whose_main_thread_ended_does_not_outlive_the_run():
    if os.geteuid() != 0:
        pytest.skip("degraded isolation needs a root worker (a uid per run)")
    limits = unique_limits(max_processes=512)
    async with harness("degraded", limits=limits) as h:
        res = await h.run(ZOMBIE_LEADER)
        assert res.status == "ok", res.error
        pid = res.return_value["pid"]
        for _ in range(100):
            if not _alive(pid):
                break
            await asyncio.sleep(0.05)
        assert not _alive(pid), f"process {pid} of the run still runs a thread after the run ended"
        assert await wait_until_gone(limits) == []
