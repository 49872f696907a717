"""Adversarial: a degraded run (its own uid, but the host's files and network) reads no other run's data and none of
the worker's secrets; each attack also runs under bubblewrap, where the namespaces stop it.

The attacks come from a review of degraded mode (all read-only code with no tools, harmless-looking in review):
a concurrent run reading what another wrote to a fixed /tmp path, or planting the file it writes into; a run
reading the worker's ``.env``; a run reaching local services with the seccomp filter off; a later run of the same
uid reading a dead worker's run directory in a TMPDIR that is not world-writable.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

import bamboo.sandbox.runner as runner_mod
from bamboo.approvals.keys import KeyStore, SigningKeyError
from bamboo.sandbox import isolation as isolation_mod
from bamboo.sandbox.errors import SandboxUnavailable
from bamboo.settings import Settings
from worker.wiring import runner_from_settings
from tests.sandbox.conftest import HAS_BWRAP, harness

MODES = ["bwrap", "degraded"]


def _skip_unless_possible(mode: str) -> None:
    if mode == "bwrap" and not HAS_BWRAP:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    if mode == "degraded" and os.geteuid() != 0:
        pytest.skip("degraded isolation needs a root worker (a uid per run)")


def _sysctl(name: str) -> int:
    try:
        return int(Path(f"/proc/sys/fs/{name}").read_text().strip())
    except (OSError, ValueError):
        return -1


@pytest.fixture
def shared_dir():
    """A directory other uids may traverse but not write, like a deployment's checkout (0755); removed after."""
    path = Path(tempfile.mkdtemp(prefix="bamboo-test-deploy-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- Finding 1: a concurrent run's files under the shared /tmp ------------------------------------------------
# The attacker starts first: it plants a file 0666 at the name the victim writes later, waits for the victim's
# report, then reads both, and tells the victim it is done. Under bwrap each has its own /tmp: nothing shows up.
VICTIM = r'''
import os, time, json
written = {{}}
for path in ("/tmp/bamboo-report-{tag}.json", "/var/tmp/bamboo-report-{tag}.json", "/dev/shm/bamboo-report-{tag}"):
    try:
        with open(path, "w") as fh:
            fh.write(json.dumps({{"data": "{canary}"}}))
        written[path] = oct(os.stat(path).st_mode & 0o777)
    except OSError as exc:
        written[path] = type(exc).__name__
deadline = time.time() + {wait}
while not os.path.exists("/tmp/planted-{tag}.txt") and time.time() < deadline:
    time.sleep(0.05)
try:
    with open("/tmp/planted-{tag}.txt", "w") as fh:
        fh.write("{canary}-planted")
    written["planted"] = "written"
except OSError as exc:
    written["planted"] = type(exc).__name__
deadline = time.time() + {wait}
while not os.path.exists("/tmp/attacker-done-{tag}") and time.time() < deadline:
    time.sleep(0.05)
return written
'''

ATTACKER = r'''
import os, time, glob
fd = os.open("/tmp/planted-{tag}.txt", os.O_CREAT | os.O_RDWR, 0o666)
os.fchmod(fd, 0o666)
os.close(fd)
deadline = time.time() + {wait}
while not os.path.exists("/tmp/bamboo-report-{tag}.json") and time.time() < deadline:
    time.sleep(0.05)
deadline = time.time() + 2
while os.path.getsize("/tmp/planted-{tag}.txt") == 0 and time.time() < deadline:
    time.sleep(0.05)
got = {{}}
for path in ["/tmp/bamboo-report-{tag}.json", "/var/tmp/bamboo-report-{tag}.json", "/dev/shm/bamboo-report-{tag}",
             "/tmp/planted-{tag}.txt", *glob.glob("/tmp/bamboo-sandbox-run-*/*")]:
    try:
        got[path] = open(path).read()
    except OSError as exc:
        got[path] = type(exc).__name__
open("/tmp/attacker-done-{tag}", "w").close()
return got
'''


@pytest.mark.parametrize("mode", MODES)
async def test_a_concurrent_run_cannot_read_the_files_another_wrote_in_the_shared_places(mode):
    _skip_unless_possible(mode)
    tag, canary = secrets.token_hex(4), "victimdata" + secrets.token_hex(6)
    wait = 8 if mode == "degraded" else 1.5  # under bwrap the other run's files never appear
    try:
        async with harness(mode) as h:
            attacker = asyncio.create_task(h.run(ATTACKER.format(tag=tag, wait=wait), timeout_s=20))
            await asyncio.sleep(0.3)
            victim_task = asyncio.create_task(h.run(VICTIM.format(tag=tag, canary=canary, wait=wait), timeout_s=20))
            # Both to their end before the runner closes, even when one fails: a run left pending outlives the test.
            outcomes = await asyncio.gather(victim_task, attacker, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        victim, stolen = outcomes
    finally:
        for leftover in (f"/tmp/bamboo-report-{tag}.json", f"/var/tmp/bamboo-report-{tag}.json",
                         f"/dev/shm/bamboo-report-{tag}", f"/tmp/planted-{tag}.txt", f"/tmp/attacker-done-{tag}"):
            Path(leftover).unlink(missing_ok=True)  # the runs' uids are swept; this is for a failed assertion
    assert victim.status == "ok" and stolen.status == "ok", (victim.error, stolen.error)
    leaked = sorted(k for k, v in stolen.return_value.items() if canary in v and "planted" not in k)
    assert leaked == [], f"{mode}: another run read {leaked}"
    if mode == "degraded":
        # What the run creates is its uid's alone: umask 077, whatever the worker's.
        assert victim.return_value[f"/tmp/bamboo-report-{tag}.json"] == "0o600", victim.return_value
    planted = canary in stolen.return_value[f"/tmp/planted-{tag}.txt"]
    if mode == "degraded" and _sysctl("protected_regular") < 1:
        # Only the kernel stops a write into a file another uid planted in a sticky directory; without it the
        # run is told so, in every result (the decision is recorded in bamboo.sandbox.isolation).
        assert any("fs.protected_regular" in w and "sysctl -w" in w for w in victim.warnings), victim.warnings
    else:
        assert not planted, f"{mode}: the victim wrote into the file another run planted"
        assert not any("fs.protected_" in w for w in victim.warnings), victim.warnings


@pytest.mark.parametrize("values, named", [
    ({"protected_regular": "0", "protected_fifos": "0", "protected_symlinks": "0"},
     ["fs.protected_regular", "fs.protected_fifos", "fs.protected_symlinks"]),
    ({"protected_regular": "2", "protected_fifos": "0", "protected_symlinks": "1"}, ["fs.protected_fifos"]),
    ({"protected_regular": "1", "protected_fifos": "1"}, ["fs.protected_symlinks"]),  # unreadable counts as off
    ({"protected_regular": "1", "protected_fifos": "2", "protected_symlinks": "1"}, []),
])
def test_a_degraded_start_names_every_kernel_guard_that_is_off(tmp_path, values, named):
    for name, value in values.items():
        (tmp_path / name).write_text(value + "\n")
    warnings = isolation_mod.unprotected_tmp_warnings(str(tmp_path))
    if not named:
        assert warnings == []
        return
    [line] = warnings
    assert "\n" not in line and "sysctl -w" in line
    for name in ("fs.protected_regular", "fs.protected_fifos", "fs.protected_symlinks"):
        assert (name in line) == (name in named), line


# --- Finding 5 (review): the seccomp filter off gives a degraded run the host's network ------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_with_the_filter_off_no_run_reaches_a_local_service(mode):
    _skip_unless_possible(mode)
    hits: list[bytes] = []

    async def on_connect(reader, writer):
        hits.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = (f"import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    s.sendall(b'GET /temporal.api.workflowservice.v1.WorkflowService/ListWorkflowExecutions')\n"
            "    s.close()\n    return {'connected': True}\nexcept OSError as exc:\n"
            "    return {'connected': False, 'error': type(exc).__name__}")
    try:
        if mode == "degraded":
            with pytest.raises(SandboxUnavailable) as refused:
                async with harness(mode, seccomp=False) as h:
                    await h.run(code)
            message = str(refused.value)
            assert "\n" not in message and "BAMBOO_SANDBOX_SECCOMP=true" in message
        else:  # bwrap: its own network namespace holds, filter or not
            async with harness(mode, seccomp=False) as h:
                res = await h.run(code)
            assert res.status == "ok" and res.return_value["connected"] is False, (res.return_value, res.error)
        await asyncio.sleep(0.2)
    finally:
        server.close()
        await server.wait_closed()
    assert hits == []


# --- Finding 3 (review): the worker's .env, read from a degraded run ---------------------------------------------
ENV_READ = r'''
out = {{}}
for path in {paths!r}:
    try:
        out[path] = open(path).read().encode().hex()  # hex: the output scrubber would hide a key it recognised
    except OSError as exc:
        out[path] = type(exc).__name__
return out
'''


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_cannot_read_the_workers_settings_file(mode, shared_dir, monkeypatch):
    _skip_unless_possible(mode)


    canary = "sk-canary" + secrets.token_hex(12)
    env = shared_dir / ".env"
    old = os.umask(0o022)  # an operator's `cat > .env` under the usual umask: 0644
    try:
        env.write_text(f"BAMBOO_LLM_API_KEY={canary}\nBAMBOO_PANDA_OIDC_TOKEN=eyJ{secrets.token_hex(20)}\n")
    finally:
        os.umask(old)
    monkeypatch.chdir(shared_dir)
    monkeypatch.delenv("BAMBOO_LLM_API_KEY", raising=False)
    assert Settings().llm_api_key.get_secret_value() == canary  # the worker takes its key from this file
    code = ENV_READ.format(paths=[str(env)])

    if mode == "degraded":
        with pytest.raises(SandboxUnavailable) as refused:
            runner_from_settings(Settings(sandbox_isolation="degraded"))
        message = str(refused.value)
        assert "\n" not in message and f"chmod 600 {env}" in message, message
        env.chmod(0o600)  # what the message says to do: then the sandbox starts, and the file is closed to runs
    async with harness(mode) as h:
        res = await h.run(code)
    assert res.status == "ok", res.error
    got = res.return_value[str(env)]
    assert got in ("PermissionError", "FileNotFoundError"), bytes.fromhex(got).decode(errors="replace")


@pytest.mark.skipif(os.geteuid() != 0, reason="degraded isolation needs a root worker (a uid per run)")
@pytest.mark.parametrize(("which", "mode"), [("x509_proxy", 0o640), ("agent_key", 0o644), ("mcp_config", 0o644)])
async def test_a_key_file_the_settings_name_must_be_closed_too(which, mode, shared_dir, monkeypatch):
    """The PanDA proxy the settings name (group-readable: not for runs either), the command agent's key (it signs
    the envelopes executors honour) and the MCP servers' file (it may hold tokens): a degraded run read a 0644 agent
    key whole (review). The last two are named by no secret setting of their own."""
    keys = shared_dir / "keys"
    KeyStore(keys).create("agent")
    secret = keys / "agent.pem"
    if which == "mcp_config":
        secret = shared_dir / "mcp.json"
        secret.write_text('{"servers": {}}')
        monkeypatch.setenv("BAMBOO_MCP_SERVERS_CONFIG", str(secret))
    elif which == "x509_proxy":
        secret = shared_dir / "x509up"
        secret.write_text("-----BEGIN RSA PRIVATE KEY-----\nnot-a-real-key\n-----END RSA PRIVATE KEY-----\n")
        monkeypatch.setenv("BAMBOO_PANDA_X509_PROXY", str(secret))
    secret.chmod(mode)
    monkeypatch.chdir(shared_dir)
    monkeypatch.setenv("BAMBOO_KEYS_DIR", str(keys))
    with pytest.raises(SandboxUnavailable, match=f"chmod 600 {secret}"):
        runner_from_settings(Settings(sandbox_isolation="degraded"))
    secret.chmod(0o600)
    runner = runner_from_settings(Settings(sandbox_isolation="degraded"))
    await runner.close()


def test_a_signing_key_others_can_read_is_not_used(tmp_path):
    """A key group or others can read signs for whoever reads it: it is refused with the chmod to run."""
    store = KeyStore(tmp_path)
    store.create("agent")
    store.path("agent").chmod(0o640)
    with pytest.raises(SigningKeyError, match=f"chmod 600 {store.path('agent')}$"):
        store.load("agent")
    store.path("agent").chmod(0o600)
    assert store.load("agent").identity == "agent"


# --- Finding 2 (review): a dead worker's run dir in a TMPDIR that is not world-writable -------------------------
CRASH_VICTIM = r'''
import os
with open("findings.txt", "w") as fh:
    fh.write("{canary}")
return {{"cwd": os.getcwd(), "uid": os.getuid()}}
'''
CRASH_ATTACKER = r'''
import os, glob
out = {{"uid": os.getuid()}}
for path in glob.glob("{tmpdir}/bamboo-sandbox-run-*/*"):
    try:
        out[path] = open(path).read()
    except OSError as exc:
        out[path] = type(exc).__name__
return out
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="degraded isolation needs a root worker (a uid per run)")
async def test_a_dead_workers_run_dir_in_a_private_tmpdir_is_gone_before_its_uid_runs_again(monkeypatch):
    # TMPDIR=/var/lib/bamboo/tmp-like: root's, 0755, under no world-writable directory (/run is 0755 root).
    tmpdir = tempfile.mkdtemp(prefix="bamboo-test-tmpdir-", dir="/run")
    os.chmod(tmpdir, 0o755)
    canary = "victimdata" + secrets.token_hex(6)
    uid_first = 1_500_000_000 + os.getpid() % 100_000  # one uid: the next lease is the same uid
    try:
        monkeypatch.setattr(tempfile, "tempdir", tmpdir)
        # Worker 1 dies after its run (SIGKILL, OOM, reboot): neither the run dir's removal nor the sweep happen.
        monkeypatch.setattr(runner_mod, "_remove", lambda path: None)
        monkeypatch.setattr(runner_mod, "remove_owned", lambda uid, roots: True)
        async with harness("degraded", uid_first=uid_first, uid_count=1) as first:
            victim = await first.run(CRASH_VICTIM.format(canary=canary))
        assert victim.status == "ok", victim.error
        left = victim.return_value["cwd"]
        assert os.path.dirname(left) == tmpdir and os.path.exists(left)
        monkeypatch.undo()
        monkeypatch.setattr(tempfile, "tempdir", tmpdir)
        # Worker 2 (restarted) leases that uid to another session's run.
        async with harness("degraded", uid_first=uid_first, uid_count=1) as second:
            attacker = await second.run(CRASH_ATTACKER.format(tmpdir=tmpdir))
        assert attacker.status == "ok", attacker.error
        assert attacker.return_value["uid"] == victim.return_value["uid"]
        assert canary not in json.dumps(attacker.return_value), attacker.return_value
        assert not os.path.exists(left)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
