"""The watchdog's counts of a degraded run's files cost a walk of the host's shared temp dirs: a run shorter than
one count interval is not made to wait for one (every degraded run waited for a count at its start: +16 ms on a
warm trivial run, 1.7 times a bwrap run), and a watchdog told to stop mid-count kills nothing afterwards (the run's
pids may be others' by then)."""

from __future__ import annotations

import threading
import time

from bamboo.sandbox.memory import RssWatchdog


def test_a_run_shorter_than_one_count_interval_is_not_counted():
    counted: list[int] = []
    watchdog = RssWatchdog(limit_bytes=None, members=lambda: [], interval_s=0.05, held_interval_s=0.2,
                           disk=lambda pids: counted.append(1) or 0, disk_limit_bytes=1)
    watchdog.start()
    time.sleep(0.1)
    watchdog.stop()
    assert counted == []


def test_a_watchdog_told_to_stop_during_a_count_kills_nothing_after_it():
    counting, release = threading.Event(), threading.Event()

    def slow_count(pids: list[int]) -> int:
        counting.set()
        release.wait(10)
        return 1 << 40  # over any cap

    watchdog = RssWatchdog(limit_bytes=None, members=lambda: [], interval_s=0.01, held_interval_s=0.01,
                           disk=slow_count, disk_limit_bytes=1)
    watchdog.start()
    assert counting.wait(10)
    watchdog.signal_stop()
    release.set()
    watchdog.stop()
    assert not watchdog.over_disk
