"""The RSS watchdog's two halves on real processes: finding a run's process tree, and killing it over the total."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from bamboo.sandbox.memory import RssWatchdog, RunProcesses, resident_bytes

TREE = """
import os, sys, time
if os.fork() == 0:
    if os.fork() == 0:
        blob = b"x" * (40 * 1024 * 1024)
        print(os.getpid(), flush=True)
    time.sleep(30)
    os._exit(0)
time.sleep(30)
"""


def test_the_whole_tree_is_found_without_a_uid():
    """Without a uid of the run's own, membership follows parent links (under bwrap the pid namespace keeps
    orphans inside the tree: they are reparented to its init, a member)."""
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    found: list[int] = []
    try:
        grandchild = int(proc.stdout.readline())
        members = RunProcesses(root_pid=proc.pid, uid=None)
        found = members()
        assert proc.pid in found and grandchild in found and len(found) == 3
        assert resident_bytes(grandchild) >= 40 * 1024 * 1024
        for _ in range(RunProcesses.FULL_RESCAN_EVERY + 1):  # the full rescans find the same tree
            assert sorted(members()) == sorted(found)
    finally:
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_the_watchdog_kills_the_members_over_the_total():
    proc = subprocess.Popen([sys.executable, "-c", "blob = b'x' * (80 * 1024 * 1024)\nimport time\ntime.sleep(30)"])
    try:
        dog = RssWatchdog(limit_bytes=48 * 1024 * 1024, members=RunProcesses(root_pid=proc.pid, uid=None))
        dog.start()
        assert proc.wait(timeout=10) == -9
        dog.stop()
        assert dog.tripped and dog.peak_bytes > 48 * 1024 * 1024
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_watchdog_leaves_a_run_under_its_total_alone():
    proc = subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(1)"])
    dog = RssWatchdog(limit_bytes=512 * 1024 * 1024, members=RunProcesses(root_pid=proc.pid, uid=None))
    dog.start()
    assert proc.wait(timeout=10) == 0
    dog.stop()
    assert not dog.tripped
