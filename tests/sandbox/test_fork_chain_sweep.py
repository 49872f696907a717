"""A degraded run's fork chain dies with the run (review): a process that calls setsid, then forks and exits over
and over, changes its pid every fraction of a millisecond. The sweep after the run scans /proc: it lists a pid that
is gone before its status is read, and the chain's next pid is born after the listing. One empty scan counted as
clean, the uid was given back, and the chain ran on under it, open to the next run (another session's) leased that
uid. The sandbox's filter now refuses setsid and setpgid, so every process of a run stays in the run's process group,
and the runner's killpg reaches each of them at once, however fast they fork (``bamboo.sandbox.seccomp``).

Reproduced as on a host whose pid 1 (systemd, tini, dumb-init) reaps orphans at once: the worker runs under a
subreaper that does. Without one, the chain's exited links stay zombies, count against the uid's process limit,
and the chain stalls where a scan finds it. And as on a busy host: two thousand more entries in /proc (zombies,
which cost nothing else), so that a scan takes longer than a link lives. With the ~110 processes of a test
container the chain outlived the old sweep in about half the runs; with them, in every one tried (8 of 8)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ZOMBIES = 2000

# The subreaper the worker runs under: reaps every orphan the moment it is reparented to it.
REAPER = r"""
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed")
main = os.fork()
if main == 0:
    os.execv(sys.argv[1], sys.argv[1:])
while True:
    pid, status = os.waitpid(-1, 0)
    if pid == main:
        sys.exit(os.waitstatus_to_exitcode(status))
"""

# The run: a fork chain that writes its heartbeat (a count and the time) into a root-owned file it may write.
CHAIN = r"""
import os, time
if os.fork() == 0:
    try:
        os.setsid()  # refused by the sandbox's filter now: the chain then runs on inside the run's process group
    except OSError:
        pass
    n = 0
    while True:
        try:
            pid = os.fork()
        except OSError:
            time.sleep(0.001)
            continue
        if pid:
            os._exit(0)
        n += 1
        if n % 20 == 0:
            try:
                fd = os.open({heartbeat!r}, os.O_WRONLY | os.O_TRUNC)
                os.write(fd, ("%d %f" % (n, time.time())).encode())
                os.close(fd)
            except OSError:
                pass
deadline = time.time() + 5
while open({heartbeat!r}).read() == "none yet" and time.time() < deadline:  # until the chain beats
    time.sleep(0.05)
time.sleep(0.3)
return {{"uid": os.getuid(), "heartbeat": open({heartbeat!r}).read()}}
"""

# The worker: one degraded run, the runner closed (the uid given back), then a second of watching the uid.
SCENARIO = r"""
import asyncio, fcntl, json, os, resource, subprocess, sys, time
sys.path.insert(0, {repo!r})
from bamboo.sandbox.uids import LOCK_DIR
from tests.sandbox.conftest import harness, unique_limits

UID, HEARTBEAT, CODE, ZOMBIES = {uid}, {heartbeat!r}, {code!r}, {zombies}
FILLER = "import os, sys, time\nfor _ in range(%d):\n    os.fork() or os._exit(0)\nprint(flush=True)\ntime.sleep(60)" % ZOMBIES


def uid_has_processes(uid):
    # The kernel's count of the uid's processes (RLIMIT_NPROC), not a scan of /proc, which a fork chain escapes: as
    # the uid, with a limit of 2 (itself and the child it forks), the fork fails while any other process of it exists.
    pid = os.fork()
    if pid == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            resource.setrlimit(resource.RLIMIT_NPROC, (2, 2))
            try:
                child = os.fork()
            except BlockingIOError:
                os._exit(0)
            if child == 0:
                os._exit(0)
            os.waitpid(child, 0)
            os._exit(3)
        finally:
            os._exit(1)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert code in (0, 3), code
    return code == 0


async def main():
    filler = subprocess.Popen(["/usr/bin/python3", "-I", "-S", "-c", FILLER], stdout=subprocess.PIPE)
    filler.stdout.readline()  # its zombies are in /proc: every scan reads their status
    try:
        await run()
    finally:
        filler.kill()  # its zombies go to the subreaper, which reaps them
        filler.wait()


async def run():
    async with harness("degraded", uid_first=UID, uid_count=1, pool_size=0, limits=unique_limits()) as h:
        res = await h.run(CODE, timeout_s=10)
        kept = [lease.uid for lease in h.runner._quarantined]
    fd = os.open(LOCK_DIR / str(UID), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the uid is still held: it was not given back
        given_back = True
    except BlockingIOError:
        given_back = False
    finally:
        os.close(fd)
    first = open(HEARTBEAT).read()
    alive = []
    for _ in range(10):
        time.sleep(0.1)
        alive.append(uid_has_processes(UID))
    print(json.dumps({{"status": res.status, "error": res.error, "return": res.return_value, "kept": kept,
                      "given_back": given_back, "alive": alive, "first": first, "last": open(HEARTBEAT).read()}}))


asyncio.run(main())
"""


def _kill_everything_of(uid: int) -> None:
    """What a failing run of this test leaves behind: kill(-1) as the uid, a few times."""
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            try:
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.05)


@pytest.mark.skipif(os.geteuid() != 0, reason="degraded isolation needs a root worker (a uid per run)")
def test_a_fork_chain_that_changes_its_pid_does_not_outlive_the_run():
    uid = 1_900_000_000 + secrets.randbelow(50_000_000)
    folder = Path(tempfile.mkdtemp(prefix="bamboo-test-chain-"))
    folder.chmod(0o755)
    heartbeat = folder / "heartbeat"
    heartbeat.write_text("none yet")
    heartbeat.chmod(0o666)  # root's: the sweep of the uid's files after the run leaves it be
    code = CHAIN.format(heartbeat=str(heartbeat))
    scenario = SCENARIO.format(repo=str(REPO), uid=uid, heartbeat=str(heartbeat), code=code, zombies=ZOMBIES)
    worker = subprocess.Popen([sys.executable, "-c", REAPER, sys.executable, "-c", scenario], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = worker.communicate(timeout=20)
        assert worker.returncode == 0, err[-3000:]
        seen = json.loads(out.strip().splitlines()[-1])
        assert seen["status"] == "ok", seen["error"]
        assert seen["return"]["uid"] == uid and seen["return"]["heartbeat"] != "none yet", seen  # the chain ran
        assert seen["kept"] == [] and seen["given_back"], seen
        assert not any(seen["alive"]), f"processes of uid {uid} outlived the run that was given its uid back: {seen}"
        assert seen["first"] == seen["last"], f"the run's fork chain still beats after its uid was given back: {seen}"
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)  # the reaper, the worker and the zombies' parent
            worker.communicate()
        _kill_everything_of(uid)
        shutil.rmtree(folder, ignore_errors=True)
