"""Adversarial suite: each test is an escape attempt and asserts the specific containment that stops it.

Most attempts run under bubblewrap (the real boundary). Where degraded mode (no bwrap) makes a
promise of its own — clean environment, other uid, rlimits, group kill — it is tested too; where it
does not (network, filesystem view), the result's warnings say so and a test pins that.
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import json
import os
import platform
from pathlib import Path

import pytest


from tests.sandbox.conftest import (
    AWS_KEY,
    GITHUB_TOKEN,
    harness,
    needs_bwrap,
    needs_root,
    unique_limits,
    wait_until_gone,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# --- reading the worker's secrets --------------------------------------------------------------
async def test_environment_holds_no_worker_secret(any_mode, worker_secret):
    res = await any_mode.run(
        f"import os\nreturn {{'env': dict(os.environ), 'leak': {worker_secret!r} in repr(os.environ)}}"
    )
    assert res.status == "ok", res.error
    assert res.return_value["leak"] is False
    assert set(res.return_value["env"]) <= {"HOME", "TMPDIR", "LANG", "PATH", "PWD", "SANDBOX_CHILD"}


async def test_parent_proc_environ_is_unreadable_or_clean(any_mode, worker_secret):
    code = f"""
import os
seen = {{}}
for pid in {{os.getppid(), 1}}:
    try:
        seen[str(pid)] = {worker_secret!r}.encode() in open(f"/proc/{{pid}}/environ", "rb").read()
    except OSError as exc:
        seen[str(pid)] = type(exc).__name__
return seen
"""
    res = await any_mode.run(code)
    assert res.status == "ok", res.error
    assert True not in res.return_value.values()
    if any_mode.runner.isolation == "degraded":
        # Another uid: the worker's /proc/<pid>/environ is simply not readable.
        assert res.return_value[str(os.getpid())] == "PermissionError"


async def test_no_process_environ_anywhere_holds_the_secret(any_mode, worker_secret):
    code = f"""
import os
hits, readable = [], 0
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            data = open(f"/proc/{{name}}/environ", "rb").read()
        except OSError:
            continue
        readable += 1
        if {worker_secret!r}.encode() in data:
            hits.append(name)
return {{"hits": hits, "readable": readable}}
"""
    res = await any_mode.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["hits"] == []


@needs_bwrap
async def test_pid_namespace_hides_host_processes(bw):
    res = await bw.run("import os\nreturn {'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}")
    assert res.status == "ok", res.error
    assert len(res.return_value["pids"]) <= 4  # bwrap's init, the runner, maybe a reaper


@needs_bwrap
async def test_worker_files_are_not_in_view(bw):
    code = f"""
import os
return {{"project": os.path.exists({str(PROJECT_ROOT)!r}), "worker_home": os.path.exists({str(Path.home())!r}),
        "etc": os.path.exists("/etc/passwd"), "top": sorted(os.listdir("/"))}}
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["project"] is False and res.return_value["worker_home"] is False
    assert res.return_value["etc"] is False
    assert set(res.return_value["top"]) <= {"usr", "lib", "lib64", "proc", "dev", "tmp", "sandbox", "opt"}


@needs_root
async def test_degraded_cannot_read_root_only_files(degraded):
    res = await degraded.run(
        "try:\n    open('/etc/shadow').read()\n    return {'read': True}\nexcept OSError as e:\n    return {'read': type(e).__name__}"
    )
    assert res.status == "ok", res.error
    assert res.return_value["read"] == "PermissionError"


# --- privilege ---------------------------------------------------------------------------------
@needs_root
async def test_runs_as_another_uid_and_cannot_regain_root(any_mode):
    code = """
import os
try:
    os.setuid(0)
    regained = True
except OSError:  # EPERM as another uid; EINVAL in bwrap's user namespace, where uid 0 is not even mapped
    regained = False
return {"uid": os.getuid(), "euid": os.geteuid(), "regained": regained}
"""
    res = await any_mode.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["regained"] is False
    if any_mode.runner.isolation == "bwrap":  # the namespace maps the run's host uid to nobody
        assert res.return_value["uid"] == res.return_value["euid"] == 65534
    else:  # a uid of the run's own, from the leased range
        assert res.return_value["uid"] == res.return_value["euid"] >= 1_000_000_000


@needs_root
async def test_degraded_cannot_signal_the_worker(degraded):
    res = await degraded.run(
        f"import os\ntry:\n    os.kill({os.getpid()}, 0)\n    return {{'signalled': True}}\n"
        "except PermissionError:\n    return {'signalled': False}"
    )
    assert res.status == "ok", res.error
    assert res.return_value["signalled"] is False


async def test_dunder_walk_reaches_os_but_not_privilege(any_mode):
    code = """
os_mod = next(c for c in ().__class__.__base__.__subclasses__() if c.__name__ == "_wrap_close").__init__.__globals__
try:
    os_mod["setgid"](0)
    ok = True
except OSError:
    ok = False
return {"setgid": ok}
"""
    res = await any_mode.run(code)
    assert res.status == "ok", res.error
    if os.geteuid() == 0:
        assert res.return_value["setgid"] is False


# --- network -----------------------------------------------------------------------------------
@needs_bwrap
async def test_network_connection_to_the_host_is_impossible(bw):
    connections = []

    async def on_connect(reader, writer):
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    return {{"connected": True}}
except OSError as exc:
    return {{"connected": False, "error": type(exc).__name__}}
"""
        res = await bw.run(code)
    finally:
        server.close()
        await server.wait_closed()
    assert res.status == "ok", res.error
    assert res.return_value["connected"] is False
    assert connections == []


@needs_bwrap
async def test_no_dns_and_no_interfaces(bw):
    code = """
import socket
try:
    socket.getaddrinfo("pandaserver.cern.ch", 443)
    resolved = True
except OSError:
    resolved = False
try:
    names = [n for _, n in socket.if_nameindex()]
except OSError:  # listing interfaces needs a socket of a family the seccomp filter refuses
    names = None
return {"resolved": resolved, "interfaces": names}
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["resolved"] is False
    assert res.return_value["interfaces"] in (None, [], ["lo"])


async def test_degraded_mode_says_it_shares_the_network(degraded):
    res = await degraded.run("return {}")
    assert res.isolation == "degraded"
    assert any("network" in w for w in res.warnings)
    assert any("DEGRADED" in w for w in res.warnings)


# --- filesystem --------------------------------------------------------------------------------
@needs_bwrap
async def test_writes_outside_the_work_dir_fail(bw):
    code = """
import os
results = {}
for path in ["/usr/lib/evil.py", "/evil", "/opt/sandbox/child_runner.py", "/proc/sys/kernel/hostname",
             "/dev/evil", "/dev/shm/evil"]:
    try:
        with open(path, "w") as fh:
            fh.write("x")
        results[path] = "written"
    except OSError as exc:
        results[path] = type(exc).__name__
with open("notes.txt", "w") as fh:
    fh.write("fine")
with open("/dev/null", "w") as fh:
    fh.write("devices still work")
results["cwd"] = os.getcwd()
return results
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert "written" not in res.return_value.values()
    assert res.return_value["cwd"] == "/sandbox"


@needs_bwrap
async def test_tmp_is_private_to_the_run(bw, tmp_path):
    name = f"bamboo-escape-{os.getpid()}-{id(tmp_path)}"
    res = await bw.run(f"open('/tmp/{name}', 'w').write('x')\nreturn {{}}")
    assert res.status == "ok", res.error
    assert not Path("/tmp", name).exists()


async def test_file_size_limit(any_mode):
    code = """
try:
    with open("big.bin", "wb") as fh:
        fh.write(b"x" * (40 * 1024 * 1024))
    return {"wrote": True}
except OSError as exc:
    return {"wrote": False, "errno": exc.errno}
"""
    res = await any_mode.run(code)
    assert res.status == "ok", res.error
    assert res.return_value == {"wrote": False, "errno": 27}  # EFBIG


async def test_open_file_limit(any_mode):
    code = """
handles = []
try:
    for _ in range(500):
        handles.append(open("/dev/null"))
    return {"exhausted": False}
except OSError as exc:
    return {"exhausted": True, "errno": exc.errno, "opened": len(handles)}
"""
    res = await any_mode.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["exhausted"] is True and res.return_value["errno"] == 24  # EMFILE


# --- processes ---------------------------------------------------------------------------------
@needs_bwrap
async def test_no_shell_to_spawn(bw):
    code = """
import os, subprocess, asyncio
out = {"system": os.system("id")}
try:
    subprocess.run(["/bin/sh", "-c", "id"])
    out["subprocess"] = "ran"
except OSError as exc:
    out["subprocess"] = type(exc).__name__
try:
    await asyncio.create_subprocess_shell("id")
    out["asyncio"] = "ran"
except OSError as exc:
    out["asyncio"] = type(exc).__name__
return out
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["system"] != 0
    assert res.return_value["subprocess"] == "FileNotFoundError"
    assert res.return_value["asyncio"] == "FileNotFoundError"


@needs_bwrap
async def test_a_python_subprocess_stays_inside_the_sandbox(bw):
    code = """
import subprocess, sys
probe = "import os, socket\\ntry:\\n socket.create_connection(('127.0.0.1', 22), timeout=1)\\n net='yes'\\nexcept OSError:\\n net='no'\\nprint(os.getuid(), net, os.path.exists('/etc/passwd'))"
out = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=10)
return {"out": out.stdout.split()}
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["out"] == ["65534", "no", "False"]


@needs_root
async def test_fork_bomb_is_bounded_and_cleaned_up(any_mode):
    limits = unique_limits(max_processes=16)
    async with harness(any_mode.runner.isolation, limits=limits) as h:
        code = """
import os, time
forks = 0
try:
    for _ in range(10000):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        forks += 1
except OSError as exc:
    return {"forks": forks, "errno": exc.errno}
return {"forks": forks}
"""
        res = await h.run(code, timeout_s=10)
        assert res.status == "ok", res.error
        assert res.return_value["errno"] == 11  # EAGAIN from RLIMIT_NPROC
        assert res.return_value["forks"] < 16
        assert await wait_until_gone(limits) == []


async def test_setsid_daemon_dies_with_the_run(any_mode):
    # RLIMIT_NPROC counts every process of the sandbox uid on the host (warm-pool children of other
    # runners included), so give this test room: it is about the daemon's death, not the process cap.
    limits = unique_limits(max_processes=512)
    async with harness(any_mode.runner.isolation, limits=limits) as h:
        code = """
import os, time
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # the sandbox's filter refuses it: the daemon stays in the run's group
        pass
    if os.fork() == 0:
        time.sleep(120)
    os._exit(0)
time.sleep(0.2)
return {"daemonised": True}
"""
        res = await h.run(code)
        assert res.status == "ok", res.error
        assert await wait_until_gone(limits) == []


# The namespace's init (bwrap's pid 1) runs as the run's uid and its memory is writable through /proc/1/mem: code
# written where it resumes from wait4 clears its parent-death signal and closes the output pipes, so killing bwrap
# ended nothing and proc.wait() returned at once. x86-64 machine code: prctl(PR_SET_PDEATHSIG, 0), close(1),
# close(2), then pause() for ever.
INIT_PATCH = "bf0100000031f6b89d0000000f05bf01000000b8030000000f05bf02000000b8030000000f05b8220000000f05ebf7"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the init patch is x86-64 machine code")
@pytest.mark.parametrize("own_uid", [True, False], ids=["uid-per-run", "no-uid-of-its-own"])
async def test_a_run_that_disarms_its_namespace_init_does_not_outlive_the_run(bw, own_uid):
    """With a uid of its own the run's uid is swept; without one (a worker that is not root) the namespace's
    init is killed, which ends everything in the namespace."""
    limits = unique_limits(max_processes=512)
    async with harness("bwrap", limits=limits) as h:
        if not own_uid:
            h.runner._uids = None
        code = f"""
import os, time
pc = int(open("/proc/1/syscall").read().split()[-1], 16)
with open("/proc/1/mem", "r+b", buffering=0) as mem:
    mem.seek(pc)
    mem.write(bytes.fromhex("{INIT_PATCH}"))
if os.fork() == 0:
    for fd in range(64):
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.setsid()
    except PermissionError:  # the sandbox's filter refuses it: the daemon stays in the run's group
        pass
    while True:
        time.sleep(0.5)
if os.fork() == 0:
    if os.fork() == 0:
        time.sleep(0.2)
        os._exit(0)
    os._exit(0)
os.wait()
time.sleep(0.6)
return {{"patched": hex(pc)}}
"""
        res = await h.run(code)
        assert res.status == "ok", res.error
        assert await wait_until_gone(limits) == [], "a process of the run outlived it"


async def test_a_tree_deeper_than_a_recursive_removal_goes_and_its_uid_is_given_back(degraded):
    """shutil.rmtree recursed once per level: a tree 1,500 deep made it raise RecursionError, so the run's files
    outlived it (a later run of another uid read them), its uid stayed leased, and every start under it failed.

    The disk cap's count reads MAX_DEPTH levels, so a tree deeper than that stops the run (what it holds below
    cannot be counted); the run holds it until then, and what it left is removed all the same."""
    code = """
import os, time
top = os.getcwd()
print("RUN", os.getuid(), top, flush=True)
for where in (top, "/tmp"):
    os.chdir(where)
    name = "deep-%d" % os.getuid()
    os.mkdir(name)
    os.chdir(name)
    for _ in range(1500):
        os.mkdir("d")
        os.chdir("d")
    open("payload", "w").write("left by uid %d" % os.getuid())
time.sleep(5)  # holding the trees: the guard's count looks many times meanwhile
return {"uid": os.getuid(), "top": top}
"""
    res = await degraded.run(code)
    assert res.status == "disk_limit" and "MiB of disk" in (res.error or ""), (res.status, res.error)
    _, printed_uid, top = next(line for line in res.stdout.preview.splitlines() if line.startswith("RUN ")).split(" ", 2)
    uid = int(printed_uid)
    assert not os.path.exists(top) and not os.path.exists(f"/tmp/deep-{uid}")
    with open(f"/run/bamboo-sandbox-uids/{uid}", "rb") as lock:  # the uid was given back: its lock is free
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(lock, fcntl.LOCK_UN)
    again = await degraded.run("return {'n': 1}")
    assert again.status == "ok", again.error


async def test_memory_bomb_hits_the_address_space_limit(any_mode):
    res = await any_mode.run("blob = bytearray(3 * 1024 ** 3)\nreturn {'allocated': len(blob)}")
    assert res.status == "error"
    assert "MemoryError" in res.error


async def test_cpu_loop_past_the_wall_clock_is_killed(any_mode):
    limits = unique_limits()
    async with harness(any_mode.runner.isolation, limits=limits) as h:
        code = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass"
        res = await h.run(code, timeout_s=1.5)
        assert res.status == "timeout"
        assert "wall-clock" in res.error
        assert await wait_until_gone(limits) == []


async def test_cpu_time_limit_kills_a_busy_loop(any_mode):
    async with harness(any_mode.runner.isolation, limits=unique_limits(cpu_seconds=1)) as h:
        res = await h.run("while True:\n    pass", timeout_s=30)
        assert res.status == "crashed"
        assert "SIGXCPU" in res.error or "SIGKILL" in res.error


async def test_gigabytes_of_output_are_cut_off(any_mode):
    res = await any_mode.run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", timeout_s=30)
    assert res.status == "output_limit"
    cap = any_mode.runner.output.capture_bytes
    assert res.stdout.truncated
    assert len(res.stdout.preview.encode()) <= any_mode.runner.output.preview_bytes + 200
    stored = json.loads(await any_mode.blobs.get(res.full_output_ref))
    assert len(stored["stdout"].encode()) <= cap


# --- reaching the project or native code ---------------------------------------------------------
async def test_project_modules_are_not_importable(any_mode):
    code = f"""
import sys
out = {{}}
for mod in ["bamboo", "bamboo.settings", "policy", "activities", "temporalio", "pydantic"]:
    try:
        __import__(mod)
        out[mod] = "imported"
    except ImportError:
        out[mod] = "blocked"
sys.path.insert(0, {str(PROJECT_ROOT)!r})
try:
    import bamboo.settings
    out["via_path"] = "imported"
except ImportError:
    out["via_path"] = "blocked"
return out
"""
    res = await any_mode.run(code)
    assert res.status == "ok", res.error
    first = {k: v for k, v in res.return_value.items() if k != "via_path"}
    assert set(first.values()) == {"blocked"}
    if any_mode.runner.isolation == "bwrap":
        assert res.return_value["via_path"] == "blocked"


@needs_bwrap
async def test_ctypes_is_not_loadable(bw):
    res = await bw.run("try:\n    import ctypes\n    return {'ctypes': 'loaded'}\nexcept ImportError:\n    return {'ctypes': 'blocked'}")
    assert res.status == "ok", res.error
    assert res.return_value["ctypes"] == "blocked"


@needs_root
async def test_degraded_ctypes_cannot_raise_privileges(degraded):
    code = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
return {"setuid": libc.setuid(0), "uid": os.getuid()}
"""
    res = await degraded.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["setuid"] == -1 and res.return_value["uid"] >= 1_000_000_000


# --- the bridge: tokens, names, frames ---------------------------------------------------------
_RAW_FRAME = """
import json, os, socket, struct, sys
def raw_send(frame):
    fd = bridge._sock.fileno()
    s = socket.socket(fileno=os.dup(fd))
    body = json.dumps(frame).encode()
    s.setblocking(True)
    s.sendall(struct.pack(">I", len(body)) + body)
    s.detach()
bridge = tools._bridge_call.__self__
"""


async def test_forged_token_is_refused_and_closes_the_bridge(any_mode):
    code = _RAW_FRAME + """
import time
raw_send({"type": "call", "token": "0" * 64, "id": 1000, "tool": "get_task", "args": {"task_id": 1}})
time.sleep(2)
await tools.get_task(task_id=2)
return {"after": "served"}
"""
    res = await any_mode.run(code)
    assert res.status == "error" and "wrong token" in res.error
    assert any_mode.caller.calls == []
    assert [b["reason"] for b in any_mode.audit_bodies()] == ["bad_token"]


async def test_replayed_frame_is_refused(any_mode):
    code = _RAW_FRAME + """
await tools.get_task(task_id=1)
raw_send({"type": "call", "token": bridge._token, "id": 1, "tool": "get_task", "args": {"task_id": 1}})
await tools.get_task(task_id=2)  # answered only after the parent has handled the replayed frame
return {}
"""
    res = await any_mode.run(code)
    assert res.status == "ok", res.error
    assert any_mode.caller.dispatched("get_task") == 2
    assert [c.reason for c in res.calls] == [None, "replayed_frame", None]


async def test_token_from_another_run_is_refused(bw):
    # Not under a key named "token": the scrubber redacts values under secret names in return values.
    first = await bw.run("return {'stolen': tools._bridge_call.__self__._token}")
    stolen = first.return_value["stolen"]
    assert len(bytes.fromhex(stolen)) == 32  # 256-bit per-run token
    res = await bw.run(_RAW_FRAME + f"""
raw_send({{"type": "call", "token": {stolen!r}, "id": 5, "tool": "get_task", "args": {{"task_id": 1}}}})
try:
    await tools.get_task(task_id=2)
except ToolDenied:
    pass
return {{}}
""")
    assert res.status == "error" and "wrong token" in res.error
    assert bw.caller.calls == []
    assert [c.reason for c in res.calls] == ["bad_token"]


async def test_disallowed_tool_is_not_importable_nor_reachable_by_getattr(bw):
    code = """
out = {}
try:
    from sandbox_tools import kill_task
    out["import"] = "imported"
except ImportError:
    out["import"] = "blocked"
try:
    getattr(tools, "kill_task")
    out["getattr"] = "found"
except AttributeError as exc:
    out["getattr"] = str(exc)
out["dir"] = sorted(n for n in dir(tools) if not n.startswith("_"))
return out
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert res.return_value["import"] == "blocked"
    assert "not available in this run" in res.return_value["getattr"]
    assert res.return_value["dir"] == ["get_log", "get_task"]
    assert bw.caller.dispatched("kill_task") == 0


async def test_aliasing_and_string_names_are_resolved_at_call_time(bw):
    code = """
call = tools._bridge_call
alias = call
name = "".join(["kill", "_", "task"])
outcomes = []
for attempt in (lambda: alias(name, {"task_id": 1}),
                lambda: tools.__dict__["_bridge_call"]("KILL_TASK".lower(), {"task_id": 2}),
                lambda: __import__("sandbox_tools")._bridge_call(name, {"task_id": 3})):
    try:
        await attempt()
        outcomes.append("ran")
    except ToolDenied as exc:
        outcomes.append(str(exc))
return {"outcomes": outcomes}
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert all("not allowed in this run" in o for o in res.return_value["outcomes"])
    assert bw.caller.dispatched("kill_task") == 0
    assert [b["outcome"] for b in bw.audit_bodies()] == ["denied"] * 3


async def test_raw_frame_with_the_right_token_still_meets_the_allow_set(bw):
    code = _RAW_FRAME + """
bridge._next_id += 1
raw_send({"type": "call", "token": bridge._token, "id": bridge._next_id, "tool": "kill_task", "args": {"task_id": 9}})
await tools.get_task(task_id=1)  # answered only after the parent has handled the raw frame
return {}
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert bw.caller.dispatched("kill_task") == 0
    assert [(c.tool, c.outcome, c.reason) for c in res.calls] == [
        ("kill_task", "denied", "not_allowed"), ("get_task", "allowed", None)]


async def test_human_input_tool_is_never_bridged(bw):
    code = """
out = {"importable": hasattr(tools, "ask_operator")}
try:
    await tools._bridge_call("ask_operator", {})
    out["call"] = "ran"
except ToolDenied as exc:
    out["call"] = str(exc)
return out
"""
    res = await bw.run(code, allowed={"get_task", "ask_operator"})
    assert res.status == "ok", res.error
    assert res.return_value["importable"] is False
    assert "never callable from code" in res.return_value["call"]
    assert bw.caller.calls == []


async def test_tool_call_after_the_deadline_never_reaches_the_tool(bw):
    code = "import asyncio\nawait asyncio.sleep(5)\nawait tools.get_task(task_id=1)\nreturn {}"
    res = await bw.run(code, timeout_s=1.0)
    assert res.status == "timeout"
    assert bw.caller.calls == []


async def test_oversized_frame_stops_the_run(bw):
    code = _RAW_FRAME + """
fd = bridge._sock.fileno()
s = socket.socket(fileno=os.dup(fd))
s.setblocking(True)
s.sendall(struct.pack(">I", 512 * 1024 * 1024) + b"x" * 1024)
s.detach()
import asyncio
await asyncio.sleep(3)
return {}
"""
    res = await bw.run(code, timeout_s=10)
    assert res.status == "error"
    assert "protocol" in res.error
    assert bw.caller.calls == []


# --- secrets crossing the boundary ---------------------------------------------------------------
async def test_secret_smuggled_in_a_tool_result_is_scrubbed_before_the_script_sees_it(bw):
    code = f"""
data = await tools.leak_secret()
text = data["log"]
print(text)
return {{"saw_aws": {AWS_KEY!r} in text, "saw_github": {GITHUB_TOKEN!r} in text, "text": text}}
"""
    res = await bw.run(code, allowed={"leak_secret"})
    assert res.status == "ok", res.error
    assert res.return_value["saw_aws"] is False and res.return_value["saw_github"] is False
    assert "[REDACTED:aws_access_key_id]" in res.return_value["text"]
    assert res.calls[0].redactions >= 2
    assert AWS_KEY not in res.stdout.preview


async def test_secret_printed_by_the_script_is_scrubbed_from_output_and_blob(bw):
    code = f"""
key = "".join([{AWS_KEY[:8]!r}, {AWS_KEY[8:]!r}])
print("found credentials", key)
return {{"key": key}}
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert AWS_KEY not in res.stdout.preview
    assert AWS_KEY not in json.dumps(res.return_value)
    assert AWS_KEY.encode() not in await bw.blobs.get(res.full_output_ref)


async def test_base64_secret_what_scrubbing_can_and_cannot_promise(bw):
    """A long random key survives base64 as a high-entropy blob and is caught; a short password in
    base64 is indistinguishable from ordinary data and passes. Scrubbing is a last line of defence."""
    long_secret = GITHUB_TOKEN
    short_password = "hunter2!"
    code = f"""
import base64
print(base64.b64encode({long_secret!r}.encode()).decode())
print(base64.b64encode({short_password!r}.encode()).decode())
return {{}}
"""
    res = await bw.run(code)
    assert res.status == "ok", res.error
    assert base64.b64encode(long_secret.encode()).decode() not in res.stdout.preview
    assert base64.b64encode(short_password.encode()).decode() in res.stdout.preview


# --- budgets -------------------------------------------------------------------------------------
async def test_call_budget_is_enforced(bw):
    from bamboo.sandbox.models import BridgeLimits

    code = """
ok = denied = 0
for i in range(8):
    try:
        await tools.get_task(task_id=i)
        ok += 1
    except ToolDenied:
        denied += 1
return {"ok": ok, "denied": denied}
"""
    res = await bw.run(code, bridge_limits=BridgeLimits(max_calls=5))
    assert res.status == "call_limit" and "more than 5 tool calls" in res.error
    assert bw.caller.dispatched("get_task") == 5
    assert [c.reason for c in res.calls] == [None] * 5 + ["max_calls"]


async def test_arguments_are_validated_against_the_schema(bw):
    code = """
try:
    await tools.get_task(task_id="1; kill everything")
    return {"ran": True}
except ToolDenied as exc:
    return {"ran": False, "why": str(exc)}
"""
    res = await bw.run(code)
    assert res.return_value["ran"] is False and "task_id" in res.return_value["why"]
    assert bw.caller.calls == []


async def test_slow_tool_times_out_per_call(bw):
    from bamboo.sandbox.models import BridgeLimits

    code = "try:\n    await tools.slow_tool()\nexcept ToolError as exc:\n    return {'error': str(exc)}\nreturn {}"
    res = await bw.run(code, allowed={"slow_tool"}, bridge_limits=BridgeLimits(call_timeout_s=0.5))
    assert res.status == "ok", res.error
    assert "did not answer" in res.return_value["error"]
    assert res.calls[0].reason == "timeout"



async def test_a_run_cannot_leave_its_process_group(any_mode):
    """setsid and setpgid are refused (EPERM), so the runner's killpg reaches every process a run forks, at once: a
    process in a session of its own that forked and exited over and over outran the /proc scan after the run, and in
    degraded mode lived on under a uid given back to the pool (tests/sandbox/test_fork_chain_sweep.py)."""
    async with harness(any_mode.runner.isolation) as h:
        res = await h.run("""
import os
out = {}
for name, call in (("setsid", os.setsid), ("setpgid", lambda: os.setpgid(0, 0))):
    try:
        call()
        out[name] = "allowed"
    except PermissionError:
        out[name] = "refused"
return out
""")
    assert res.status == "ok", res.error
    assert res.return_value["setsid"] == "refused" and res.return_value["setpgid"] == "refused"
