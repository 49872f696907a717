"""Spawns sandbox children, feeds them one script each, serves their bridge, and kills them.

A child is started (cold, or ahead of time in the warm pool) under a uid of its own (root worker),
sends ``ready``, and waits for the ``start`` frame. From that moment the run's wall-clock deadline
counts and its memory total is guarded (a cgroup leaf, else the RSS watchdog, which also counts the
run's files on memory); in degraded mode the watchdog also holds what its uid keeps in files, on any of the
host's filesystems, to the run's disk cap. The runner serves
``call`` frames through the run's ``ToolBridge``, captures stdout/stderr with a cap, and ends the run
on the ``done`` frame, the deadline, the output cap, the memory total, the disk cap, a spent call budget, a
broken or forged frame, or cancellation — always by killing the child's whole process group (with bwrap, its
pid namespace; in degraded mode, every process of the run's uid, and then every file that uid left in
a world-writable place or in the temp directory its work dir was made in). Each child serves exactly one run.

A degraded child starts under umask 077: it shares /tmp with every other run, and under the worker's 022 a
report it wrote to a fixed /tmp path was readable by a concurrent run of another uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeGuard, TypeVar

from bamboo.sandbox.bridge import ToolBridge
from bamboo.sandbox.errors import SandboxUnavailable
from bamboo.sandbox.isolation import SANDBOX_WORKDIR, LaunchPlan, plan_launch
from bamboo.sandbox.leftovers import OwnedFiles, OwnedMemoryFiles, remove_owned, sweep_roots
from bamboo.sandbox.memory import CgroupLeaf, CgroupParent, RssWatchdog, RunProcesses, TmpfsInNamespace, guard_kind
from bamboo.sandbox.contract import Isolation, MemoryGuardKind
from bamboo.sandbox.models import OutputLimits, SandboxLimits
from bamboo.sandbox.output import CappedStream
from bamboo.sandbox.runtime_dirs import make_runtime_dir, sweep_stale_runtime_dirs
from bamboo.sandbox.protocol import ProtocolError, decode_frame, encode_frame, quote_bytes, read_frame, read_raw_frame
from bamboo.sandbox.seccomp import ChildInstaller, program_fd
from bamboo.sandbox.stubs import STUB_MODULE, generate_stub_module
from bamboo.sandbox.tree_removal import remove_tree
from bamboo.sandbox.uids import (
    DEFAULT_FIRST_UID, DEFAULT_UID_COUNT, RunUids, UidLease, UidsUnavailable, processes_of, sweep,
)

log = logging.getLogger(__name__)

CHILD_RUNNER_SOURCE = Path(__file__).with_name("child_runner.py")
READY_TIMEOUT_S = 15.0
EXIT_GRACE_S = 2.0
ORPHAN_GRACE_S = 0.5  # a killed child's exit is seen in milliseconds; later means something holds its pipes
DECODE_INLINE_BYTES = 64 * 1024  # a larger frame is decoded in a worker thread, off the event loop
DEFAULT_PYTHON = "/usr/bin/python3"
# Every file a degraded run creates is its own uid's alone: it shares /tmp, /var/tmp and /dev/shm with other runs.
DEGRADED_UMASK = 0o077


Ending = Literal["done", "exited", "timeout", "output_limit", "memory_limit", "disk_limit", "call_limit",
                 "protocol_error", "audit_failed"]
__all__ = ["ChildOutcome", "SandboxRunner", "SandboxUnavailable"]

T = TypeVar("T")


async def _to_the_end(work: Awaitable[T], *, undo: Callable[[T], Awaitable[None]] | None = None) -> T:
    """Await ``work`` to its end even if the caller is cancelled meanwhile, then re-raise the cancellation
    (after ``undo`` of the result, when given).

    For the runner's starts and teardowns, which are bounded and must not stop half-way: a teardown cut
    short by an activity's cancellation kept the run's uid lease for the worker's lifetime; a start cut short
    is described at ``SandboxRunner._spawn``."""
    task = asyncio.ensure_future(work)
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            interrupted = True
    if not interrupted:
        return task.result()
    if undo is not None and not task.cancelled() and task.exception() is None:
        await _to_the_end(undo(task.result()))
    raise asyncio.CancelledError()


@dataclass
class ChildOutcome:
    """Raw facts about one finished child, before scrubbing and blob storage."""

    isolation: Isolation
    ending: Ending
    done: dict[str, Any] | None
    stdout: CappedStream
    stderr: CappedStream
    exit_code: int | None
    duration_ms: float
    warm_start: bool
    warnings: list[str] = field(default_factory=list)
    memory_guard: MemoryGuardKind = "watchdog"
    stop_detail: str | None = None


@dataclass
class _Child:
    proc: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    workdir: Path | None
    loop: asyncio.AbstractEventLoop
    isolation: Isolation
    lease: UidLease | None = None
    leaf: CgroupLeaf | None = None

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


class SandboxRunner:
    """Runs untrusted scripts in isolated one-shot children; optionally keeps a warm pool of them."""

    def __init__(
        self,
        *,
        limits: SandboxLimits | None = None,
        output: OutputLimits | None = None,
        isolation: Literal["auto", "bwrap", "degraded"] = "auto",
        python: str = DEFAULT_PYTHON,
        pool_size: int = 0,
        seccomp: bool = True,
        uid_first: int = DEFAULT_FIRST_UID,
        uid_count: int = DEFAULT_UID_COUNT,
        max_frame_bytes: int = 1024 * 1024,
        secret_files: Sequence[str | Path] = (),
    ) -> None:
        """``secret_files``: the worker's files a degraded run must not be able to read (a degraded start refuses
        while group or others may; the worker passes those its settings name, ``isolation.worker_secret_files``)."""
        if not os.access(python, os.X_OK):
            raise SandboxUnavailable(
                f"sandbox interpreter {python!r} is not executable; install python3 or pass python=<path>"
            )
        self.python = python
        self.limits = limits or SandboxLimits()
        self.output = output or OutputLimits()
        self.pool_size = max(0, pool_size)
        self.max_frame_bytes = max(max_frame_bytes, self.output.max_return_bytes + 64 * 1024)
        sweep_stale_runtime_dirs()  # the directories of runners killed by a signal; never raises
        self._runtime_dir = make_runtime_dir()
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._runtime_dir), True)
        os.chmod(self._runtime_dir, 0o755)
        runner_copy = self._runtime_dir / "child_runner.py"
        shutil.copyfile(CHILD_RUNNER_SOURCE, runner_copy)
        os.chmod(runner_copy, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        empty_dir = self._runtime_dir / "empty"
        empty_dir.mkdir(mode=0o555)
        self._uids: RunUids | None = None
        self._quarantined: list[UidLease] = []  # uids whose processes survived every sweep: never given back
        if os.geteuid() == 0:
            try:
                self._uids = RunUids(first=uid_first, count=uid_count)
            except (UidsUnavailable, OSError) as exc:
                self._finalizer()
                raise SandboxUnavailable(f"the sandbox cannot give runs their own uids: {exc}") from exc
        probe_lease = self._uids.lease() if self._uids is not None else None
        try:
            self.plan: LaunchPlan = plan_launch(
                mode=isolation,
                python=python,
                runner_path=str(runner_copy),
                limits=self.limits,
                empty_dir=str(empty_dir),
                seccomp=seccomp,
                probe_uid=probe_lease.uid if probe_lease is not None else None,
                secret_files=secret_files,
            )
        except BaseException:
            self._finalizer()
            raise
        finally:
            if probe_lease is not None:
                probe_lease.release()
        self._installer: ChildInstaller | None = self.plan.child_installer()
        self._cgroups: CgroupParent | None = CgroupParent.probe()
        self._pool: deque[_Child] = deque()
        self._refills: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def isolation(self) -> Isolation:
        return self.plan.isolation

    @property
    def warnings(self) -> list[str]:
        return list(self.plan.warnings)

    @property
    def memory_guard(self) -> MemoryGuardKind:
        return guard_kind(self._cgroups)

    @property
    def seccomp(self) -> bool:
        return self.plan.seccomp_program is not None

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Fill the warm pool (no-op when pool_size is 0)."""
        while len(self._pool) < self.pool_size:
            self._pool.append(await self._spawn())

    async def ready(self) -> None:
        """Wait until the warm pool is full again (refills run in the background after each run)."""
        await self._refilled()
        await self.start()

    async def _refilled(self) -> None:
        """Until no background refill is running."""
        while self._refills:
            await asyncio.gather(*list(self._refills), return_exceptions=True)

    async def close(self) -> None:
        self._closed = True
        # A refill is not cancelled but allowed to finish (a start is bounded by READY_TIMEOUT_S): it sees
        # ``_closed`` and disposes of its child itself. See ``_spawn`` for why a start is never cut short.
        await self._refilled()
        while self._pool:
            await _to_the_end(self._dispose(self._pool.popleft()))
        self._finalizer()

    async def __aenter__(self) -> "SandboxRunner":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- spawning -----------------------------------------------------------------------------
    async def _spawn(self) -> _Child:
        """Start one child and wait for its ``ready`` frame; a cancelled caller gets its cancellation once the
        child is disposed of.

        The start itself is never cut short. Killed in the milliseconds while bubblewrap sets itself up, the
        sandboxed process can outlive its parent (its parent-death signal is not armed yet) and hold the
        child's pipes open, and asyncio's subprocess transport then waits for them for ever; a cancelled
        ``to_thread`` would also drop the uid lease it was taking. A start is bounded (READY_TIMEOUT_S), so
        letting it finish costs a cancellation at most that long."""
        return await _to_the_end(self._start_child(), undo=self._dispose)

    async def _start_child(self) -> _Child:
        """One start, to the end: a child that said ``ready``, or nothing left behind and SandboxUnavailable."""
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        workdir: Path | None = None
        proc: asyncio.subprocess.Process | None = None
        lease: UidLease | None = None
        leaf: CgroupLeaf | None = None
        seccomp_fd: int | None = None
        transport: asyncio.WriteTransport | None = None
        try:
            if self._uids is not None:
                try:
                    lease = await asyncio.to_thread(self._uids.lease)
                except UidsUnavailable as exc:
                    raise SandboxUnavailable(str(exc)) from exc
            if self.plan.isolation == "degraded":
                # The world-writable places (found once, then remembered) and the temp directory run dirs are made in:
                # when that is not world-writable (TMPDIR=/var/lib/bamboo/tmp, 0755), a dead worker's run dir there,
                # owned by this uid, was never swept and the next run with the uid read it.
                roots = await asyncio.to_thread(sweep_roots, tempfile.gettempdir())
                # The sweep after a run never happened if its worker died: what that run left, this run (another
                # session's, maybe) must not find. Milliseconds on a host with a tidy /tmp; refused when it cannot
                # finish (a concurrent run can fill the shared places to make it stop short).
                if lease is not None and not await asyncio.to_thread(remove_owned, lease.uid, roots):
                    raise SandboxUnavailable(
                        "the degraded sandbox cannot check the shared places (/tmp, /var/tmp, /dev/shm, ...) for files "
                        "an earlier run of its uid left: they hold more entries of others than it may look at; clear "
                        "them out, or install bubblewrap")
                workdir = Path(tempfile.mkdtemp(prefix="bamboo-sandbox-run-"))
                os.chmod(workdir, 0o700)
                if lease is not None:
                    os.chown(workdir, lease.uid, lease.gid)
            if self._cgroups is not None:
                try:
                    leaf = self._cgroups.leaf(self.limits.run_total_bytes)
                except OSError as exc:
                    raise SandboxUnavailable(f"could not create the run's cgroup: {exc}") from exc
            env = dict(self.plan.env)
            if workdir is not None:
                env.update({"HOME": str(workdir), "TMPDIR": str(workdir)})
            if self.plan.isolation == "bwrap" and self.plan.seccomp_program is not None:
                seccomp_fd = program_fd(self.plan.seccomp_program)
            argv = self.plan.argv(child_sock.fileno(), self.limits, seccomp_fd)
            extra: dict[str, Any] = {}
            if self.plan.isolation == "degraded":
                extra["umask"] = DEGRADED_UMASK  # set in the forked child before it drops to the run's uid
            if leaf is not None:
                # The child joins its cgroup before it drops to the run's uid (then it no longer could).
                extra["preexec_fn"] = _JoinThenDrop(leaf, lease.uid if lease else None, self._installer)
            else:
                if lease is not None:
                    extra.update(user=lease.uid, group=lease.gid, extra_groups=[])
                if self._installer is not None:
                    extra["preexec_fn"] = self._installer
            fds = (child_sock.fileno(),) + ((seccomp_fd,) if seccomp_fd is not None else ())
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    pass_fds=fds,
                    close_fds=True,
                    start_new_session=True,
                    env=env,
                    cwd=str(workdir) if workdir is not None else "/",
                    **extra,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise SandboxUnavailable(f"could not start the sandbox child ({argv[0]}): {exc}") from exc
            finally:
                child_sock.close()
                if seccomp_fd is not None:
                    os.close(seccomp_fd)
            reader, writer = await asyncio.open_unix_connection(sock=parent_sock, limit=self.max_frame_bytes)
            transport = writer.transport
            child = _Child(proc, reader, writer, workdir, asyncio.get_running_loop(), self.plan.isolation,
                           lease, leaf)
            try:
                hello = await asyncio.wait_for(read_frame(reader, self.max_frame_bytes), READY_TIMEOUT_S)
                reason = "it closed the bridge"
            except (asyncio.TimeoutError, ProtocolError) as exc:
                hello, reason = None, str(exc) or type(exc).__name__
            if not hello or hello.get("type") != "ready":
                await self._kill(child)
                stderr = b""
                with contextlib.suppress(Exception):
                    stderr = await asyncio.wait_for(proc.stderr.read(4096), 1.0) if proc.stderr else b""
                raise SandboxUnavailable(
                    f"the sandbox child did not become ready ({reason}); stderr: "
                    f"{stderr.decode('utf-8', 'replace').strip() or '(empty)'}"
                )
            return child
        except BaseException:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(proc.wait(), 5.0)
            # The socket belongs to its transport once there is one: closed underneath it, the descriptor's
            # number is reused while the loop still has the old transport registered under it.
            if transport is not None:
                transport.abort()
            else:
                with contextlib.suppress(OSError):
                    parent_sock.close()
            if lease is not None:
                if self.plan.isolation == "degraded":
                    await asyncio.to_thread(sweep, lease.uid)
                lease.release()
            if leaf is not None:
                await asyncio.to_thread(leaf.remove)
            _remove(workdir)
            raise

    async def _take(self) -> tuple[_Child, bool]:
        loop = asyncio.get_running_loop()
        while self._pool:
            child = self._pool.popleft()
            if child.alive and child.loop is loop:
                return child, True
            await _to_the_end(self._dispose(child))
        return await self._spawn(), False

    def _schedule_refill(self) -> None:
        if self._closed or self.pool_size == 0:
            return
        if len(self._pool) + len(self._refills) >= self.pool_size:
            return
        task = asyncio.get_running_loop().create_task(self._refill_one())
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    async def _refill_one(self) -> None:
        try:
            child = await self._spawn()
        except SandboxUnavailable as exc:
            log.error("warm pool refill failed: %s", exc)
            return
        if self._closed:
            await self._dispose(child)
        else:
            self._pool.append(child)

    # -- running ------------------------------------------------------------------------------
    async def run(self, code: str, bridge: ToolBridge, *, timeout_s: float) -> ChildOutcome:
        """Run one script to its end; cancellation kills the child and propagates."""
        started = time.monotonic()
        child, warm = await self._take()
        stub_source, _ = generate_stub_module(bridge.bridged_specs, bridge.catalogue_names, names=bridge.python_names)
        limit_hit = asyncio.Event()
        stdout = CappedStream(self.output.capture_bytes, limit_hit.set)
        stderr = CappedStream(self.output.capture_bytes, limit_hit.set)
        done: dict[str, Any] = {}
        ending: Ending = "exited"
        stop: dict[str, str] = {}
        tasks: list[asyncio.Task[Any]] = []
        watchdog: RssWatchdog | None = None
        try:
            held, disk = await asyncio.to_thread(self._counters, child)
            if child.leaf is None or disk is not None:
                watchdog = RssWatchdog(
                    limit_bytes=self.limits.run_total_bytes if child.leaf is None else None,
                    members=RunProcesses(root_pid=child.proc.pid, uid=child.lease.uid if child.lease else None),
                    held=held, disk=disk, disk_limit_bytes=self.limits.disk_total_bytes,
                )
                watchdog.start()
            deadline = time.monotonic() + timeout_s
            bridge.set_deadline(deadline)
            child.writer.write(
                encode_frame(
                    {
                        "type": "start",
                        "token": bridge.token,
                        "code": code,
                        "stub_module": STUB_MODULE,
                        "stub_source": stub_source,
                    }
                )
            )
            await child.writer.drain()
            tasks = [
                asyncio.create_task(stdout.drain(child.proc.stdout)),
                asyncio.create_task(stderr.drain(child.proc.stderr)),
            ]
            serve = asyncio.create_task(self._serve(child, bridge, done, stop))
            exited = asyncio.create_task(child.proc.wait())
            limit_wait = asyncio.create_task(limit_hit.wait())
            audit_lost = asyncio.create_task(bridge.audit_lost.wait())
            tasks += [serve, exited, limit_wait, audit_lost]
            pending: set[asyncio.Task[Any]] = {serve, exited, limit_wait, audit_lost}
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ending = "timeout"
                    break
                finished, pending = await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                if limit_wait in finished:
                    ending = "output_limit"
                    break
                if audit_lost in finished:
                    ending = "audit_failed"
                    break
                if serve in finished:
                    result = serve.result()
                    if _is_stop(result):
                        ending = result
                    else:
                        ending = "done" if done else "exited"
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(asyncio.shield(exited), EXIT_GRACE_S)
                    break
                if exited in finished:
                    # Give the bridge a moment to deliver a done frame that was already written.
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(serve), 0.5)
                    stopped = serve.result() if serve.done() and not serve.cancelled() else None
                    if stopped is not None and _is_stop(stopped):
                        ending = stopped
                    else:
                        ending = "done" if done else "exited"
                    break
        finally:
            if watchdog is not None:  # told now, waited for in _end_run, off the loop (a count may be under way)
                watchdog.signal_stop()
            bridge.close("the run has ended")
            try:
                guard_stop = await _to_the_end(self._end_run(child, tasks, watchdog))
            finally:
                # Every frame read has its row before the run reports: those cut off by the end of the run too.
                await _to_the_end(bridge.settle())
                # Refill after the run, not during it: a concurrent spawn would compete with the run for CPU.
                self._schedule_refill()
        if ending == "exited" and done:  # the done frame's row was still being written when the child exited
            ending = "done"
        if guard_stop is not None and ending not in ("timeout", "output_limit"):
            ending = guard_stop
        if bridge.audit_failed:  # fail closed: whatever the script did, its result is not taken
            ending = "audit_failed"
            stop["detail"] = "an audit write failed"
        return ChildOutcome(
            isolation=child.isolation,
            ending=ending,
            done=done or None,
            stdout=stdout,
            stderr=stderr,
            exit_code=child.proc.returncode,
            duration_ms=(time.monotonic() - started) * 1000.0,
            warm_start=warm,
            warnings=self.warnings,
            memory_guard="cgroup" if child.leaf is not None else "watchdog",
            stop_detail=stop.get("detail"),
        )

    @staticmethod
    def _counters(child: _Child) -> tuple[Callable[[list[int]], int] | None, Callable[[list[int]], int] | None]:
        """What the watchdog counts besides the resident size: the run's files on memory (added to it, see
        ``bamboo.sandbox.memory``), and in degraded mode its files anywhere (held to the disk cap). Both look where
        the sweep after the run looks (``sweep_roots``): every place the run's uid can write, its work dir included."""
        if child.isolation == "bwrap":
            return TmpfsInNamespace(("/tmp", SANDBOX_WORKDIR)), None
        if child.lease is None:
            return None, None
        roots = sweep_roots(os.path.dirname(child.workdir) if child.workdir is not None else tempfile.gettempdir())
        return OwnedMemoryFiles(child.lease.uid, roots), OwnedFiles(child.lease.uid, roots)

    async def _serve(self, child: _Child, bridge: ToolBridge, done: dict[str, Any], stop: dict[str, str]) -> str:
        """Answer call frames until the child says done, the stream ends, or a frame ends the run.

        Every frame reaches the audit log before it is answered or dropped: calls through the bridge (a
        call still in flight when the run ends writes its row as it is cut off, and one never started gets
        its row from ``ToolBridge.settle``), the ``done`` frame before its result is taken, anything else
        (undecodable, a forged token, an unknown type) as a rejected frame. A wrong token or a spent budget
        stops the reading at once, so a flood of frames costs at most one budget's worth of rows.
        """
        in_flight: set[asyncio.Task[None]] = set()

        async def answer(frame: dict[str, Any], ordinal: int) -> None:
            reply = await bridge.handle_call(frame, ordinal)
            with contextlib.suppress(ConnectionError, RuntimeError):
                child.writer.write(encode_frame(reply))
                await child.writer.drain()

        async def reject(reason: str, detail: str, preview: str) -> str:
            stop["detail"] = detail
            log.warning("sandbox run %s: %s", bridge.run_id, detail)
            await bridge.reject_frame(reason, detail, preview)
            return "protocol_error"

        try:
            while True:
                try:
                    body = await read_raw_frame(child.reader, self.max_frame_bytes)
                    if body is None:
                        return "eof"
                    frame = decode_frame(body) if len(body) <= DECODE_INLINE_BYTES else await asyncio.to_thread(
                        decode_frame, body)
                except ProtocolError as exc:
                    return await reject("malformed_frame", f"protocol error: {exc}", exc.preview)
                except ConnectionError:
                    return "eof"
                kind = frame.get("type")
                if kind == "call":
                    ordinal, verdict = bridge.screen(frame)
                    if verdict is not None:
                        await bridge.handle_call(frame, ordinal)  # denied and audited, then the run stops
                        stop["detail"] = ("a frame carried a wrong token" if verdict == "bad_token"
                                          else f"the script sent more than {bridge.limits.max_calls} tool calls")
                        return "protocol_error" if verdict == "bad_token" else "call_limit"
                    task = asyncio.create_task(answer(frame, ordinal))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                elif kind == "done":
                    if bridge.token_matches(frame):
                        if not await bridge.accept_done(frame):
                            stop["detail"] = "the done frame could not be audited"
                            return "audit_failed"
                        done.update(frame)
                        return "done"
                    return await reject("bad_token", "a done frame carried a wrong token", _frame_preview(body))
                else:
                    return await reject("unexpected_frame", f"unexpected frame type {str(kind)[:40]!r}", _frame_preview(body))
        finally:
            for task in list(in_flight):
                task.cancel()
            for task in list(in_flight):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _end_run(self, child: _Child, tasks: list[asyncio.Task[Any]],
                       watchdog: RssWatchdog | None) -> Literal["memory_limit", "disk_limit"] | None:
        """Kill and dispose of the run's child, collect its streams; the total a guard stopped it at, if one did."""
        await self._kill(child)
        await self._finish_streams(child, tasks[:2])
        for task in tasks[2:]:
            task.cancel()
        for task in tasks[2:]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if watchdog is not None:
            await asyncio.to_thread(watchdog.stop)
        out_of_memory = (watchdog is not None and watchdog.tripped) or (child.leaf is not None and child.leaf.oom_killed())
        over_disk = watchdog is not None and watchdog.over_disk
        await self._dispose(child)
        return "memory_limit" if out_of_memory else "disk_limit" if over_disk else None

    async def _finish_streams(self, child: _Child, readers: list[asyncio.Task[Any]]) -> None:
        if not readers:
            return
        _, pending = await asyncio.wait(readers, timeout=1.0)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- teardown -----------------------------------------------------------------------------
    async def _kill(self, child: _Child) -> None:
        """SIGKILL the child's process group, its namespace's init (bwrap), its cgroup, and everything the run's uid
        still runs (a uid per run, either isolation)."""
        pid = child.proc.pid
        # bwrap's children are the namespaces' inits: killing one kills everything in its pid namespace. Found
        # before bwrap dies (then they are reparented); a run can clear an init's parent-death signal by writing
        # into it through /proc/1/mem, and without a uid of its own (a worker that is not root) nothing else
        # would reach what runs there.
        inits = await asyncio.to_thread(_children, pid) if child.isolation == "bwrap" else []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        for init in inits:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(init, signal.SIGKILL)
        if child.leaf is not None:
            child.leaf.kill()
        if child.isolation == "degraded":
            if child.lease is not None:
                if not await asyncio.to_thread(sweep, child.lease.uid):
                    log.error("sandbox: processes of run uid %d survived the sweep; the uid is swept again before "
                              "it is leased", child.lease.uid)
            else:
                for victim in _descendants(pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(victim, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            child.proc.kill()
        exited = asyncio.ensure_future(child.proc.wait())
        await asyncio.wait([exited], timeout=ORPHAN_GRACE_S)
        if child.isolation != "degraded" and child.lease is not None:
            # With bwrap too, every run: the namespace ends with its init (bwrap's pid 1, killed by its parent-death
            # signal), but a run can write into that init through /proc/1/mem and clear the signal, then close its
            # pipes so proc.wait() returns at once: its processes ran on under a uid no run held. And a process
            # that outlived bwrap's setup is outside the namespace's kill. The scan costs milliseconds a run.
            await asyncio.to_thread(sweep, child.lease.uid)
        if not exited.done():
            await asyncio.wait([exited], timeout=5.0)
        if not exited.done():
            exited.cancel()

    async def _dispose(self, child: _Child) -> None:
        """Kill what is left of the run, remove what it wrote, and give its uid back only when nothing of it
        runs any more. Each step runs whatever an earlier one raised: a removal that failed once skipped the
        rest, and the uid stayed leased for the worker's life."""
        try:
            if child.alive:
                await self._kill(child)
        finally:
            try:
                # abort(), not close(): close() keeps the descriptor registered while unsent bytes remain, and the
                # transport closes the socket itself (closing it here would free its number under the transport).
                child.writer.transport.abort()
                await asyncio.to_thread(_remove, child.workdir)
                if child.isolation == "degraded" and child.lease is not None:
                    # Before the uid is leased again: what one run left, the next run with that uid must not find.
                    parent = os.path.dirname(child.workdir) if child.workdir is not None else tempfile.gettempdir()
                    roots = await asyncio.to_thread(sweep_roots, parent)
                    await asyncio.to_thread(remove_owned, child.lease.uid, roots)
            finally:
                try:
                    if child.leaf is not None:
                        await asyncio.to_thread(child.leaf.remove)
                finally:
                    await self._give_back(child)

    async def _give_back(self, child: _Child) -> None:
        """Release the run's uid, unless a process of it still runs: then it stays held, so no later run shares a
        uid with it, and the next lease of it sweeps it before use (``RunUids.lease``)."""
        lease, child.lease = child.lease, None
        if lease is None:
            return
        if await asyncio.to_thread(processes_of, lease.uid) and not await asyncio.to_thread(sweep, lease.uid):
            log.error("sandbox: processes of run uid %d survived two sweeps; the uid stays held by this worker",
                      lease.uid)
            self._quarantined.append(lease)
            return
        lease.release()


class _JoinThenDrop:
    """``preexec_fn`` when the run has a cgroup: join it, drop to the run's uid, install the filter.

    Only system calls on prepared values run between fork and exec."""

    def __init__(self, leaf: CgroupLeaf, uid: int | None, installer: ChildInstaller | None) -> None:
        self._procs = str(leaf.path / "cgroup.procs")
        self._uid = uid
        self._installer = installer

    def __call__(self) -> None:
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
        if self._uid is not None:
            os.setgroups([])
            os.setresgid(self._uid, self._uid, self._uid)
            os.setresuid(self._uid, self._uid, self._uid)
        if self._installer is not None:
            self._installer()


_STOPS = ("protocol_error", "call_limit", "audit_failed")  # what _serve returns when a frame ends the run


def _is_stop(result: str) -> TypeGuard[Ending]:
    return result in _STOPS


def _frame_preview(body: bytes) -> str:
    return quote_bytes(body)


def _children(parent: int) -> list[int]:
    """The live processes whose parent is ``parent``."""
    return [kid for kid, ppid in _parents().items() if ppid == parent]


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live process."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            parents[int(entry.name)] = int(fields[1])
    return parents


def _descendants(root: int) -> list[int]:
    """Every live process whose parent chain reaches ``root`` (degraded mode has no pid namespace)."""
    children: dict[int, list[int]] = {}
    for kid, parent in _parents().items():
        children.setdefault(parent, []).append(kid)
    found: list[int] = []
    stack = [root]
    while stack:
        for kid in children.get(stack.pop(), []):
            found.append(kid)
            stack.append(kid)
    return found


def _remove(path: Path | None) -> None:
    """Remove a run's work directory (whatever depth it wrote); what cannot be removed is logged, and the uid's
    next lease sweeps what it owns under the shared places and the temp directory (``leftovers.sweep_roots``)."""
    if path is None:
        return
    try:
        remove_tree(str(path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("sandbox: the run's work directory %s was not removed: %s", path, exc)
