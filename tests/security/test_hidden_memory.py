"""A process whose main thread ended while another holds memory shows no memory in its own /proc status (its
leader is a zombie): the run-memory watchdog counted it as nothing, and three such processes held 1.2 GiB past
a 768 MiB limit (review finding; in bwrap with native code, in degraded mode with ctypes). The count and the
sweep read a live thread's status instead. Run here on a process of the test's own, as the watchdog sees one."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bamboo.sandbox.memory import resident_bytes
from bamboo.sandbox.uids import processes_of, runs

MiB = 1024 * 1024

HOLDER = """
import ctypes, os, threading, time
def hold():
    blob = bytearray(os.urandom(1024)) * (96 * 1024)  # 96 MiB, touched
    print("held", flush=True)
    time.sleep(30)
threading.Thread(target=hold).start()
time.sleep(1)
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: the main thread only
"""


def test_memory_of_a_process_whose_main_thread_ended_is_counted_and_it_counts_as_running():
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        deadline = time.monotonic() + 10
        status = b""
        while time.monotonic() < deadline:
            status = open(f"/proc/{proc.pid}/status", "rb").read()
            if b"\nState:\tZ" in status:
                break
            time.sleep(0.05)
        assert b"\nState:\tZ" in status and b"RssAnon:" not in status, "the leader did not become a zombie"
        assert resident_bytes(proc.pid) >= 90 * MiB
        assert runs(status)
        assert proc.pid in processes_of(os.getuid(), only=proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_zombie_without_live_threads_is_not_running():
    status = b"Name:\tx\nState:\tZ (zombie)\nTgid:\t5\nUid:\t1\t1\t1\t1\nThreads:\t1\n"
    assert not runs(status)
    assert runs(status.replace(b"Threads:\t1", b"Threads:\t2"))
    assert runs(status.replace(b"State:\tZ (zombie)", b"State:\tS (sleeping)"))
