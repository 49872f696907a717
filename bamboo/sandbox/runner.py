"""Spawns sandbox children, feeds them one script each, serves their bridge, and kills them.

A child is started (cold, or ahead of time in the warm pool), sends ``ready``, and waits for the
``start`` frame. From that moment the run's wall-clock deadline counts. The runner serves ``call``
frames through the run's ``ToolBridge``, captures stdout/stderr with a cap, and ends the run on the
``done`` frame, the deadline, the output cap, or cancellation — always by killing the child's whole
process group (and, with bwrap, its pid namespace). Each child serves exactly one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import stat
import tempfile
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bamboo.sandbox.bridge import ToolBridge
from bamboo.sandbox.isolation import NOBODY, LaunchPlan, plan_launch
from bamboo.sandbox.models import Isolation, OutputLimits, SandboxLimits
from bamboo.sandbox.output import CappedStream
from bamboo.sandbox.protocol import ProtocolError, encode_frame, read_frame
from bamboo.sandbox.stubs import STUB_MODULE, generate_stub_module

log = logging.getLogger(__name__)

CHILD_RUNNER_SOURCE = Path(__file__).with_name("child_runner.py")
READY_TIMEOUT_S = 15.0
EXIT_GRACE_S = 2.0
DEFAULT_PYTHON = "/usr/bin/python3"
CHILD_TAG_ENV = "SANDBOX_CHILD"

Ending = Literal["done", "exited", "timeout", "output_limit", "protocol_error"]


class SandboxUnavailable(RuntimeError):
    """A child could not be started (missing interpreter, bwrap failure); the message says what to fix."""


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


@dataclass
class _Child:
    proc: asyncio.subprocess.Process
    sock: socket.socket
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    workdir: Path | None
    loop: asyncio.AbstractEventLoop
    isolation: Isolation

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
        sandbox_uid: int = NOBODY,
        sandbox_gid: int = NOBODY,
        max_frame_bytes: int = 1024 * 1024,
    ) -> None:
        if not os.access(python, os.X_OK):
            raise SandboxUnavailable(
                f"sandbox interpreter {python!r} is not executable; install python3 or pass python=<path>"
            )
        self.limits = limits or SandboxLimits()
        self.output = output or OutputLimits()
        self.pool_size = max(0, pool_size)
        self.max_frame_bytes = max(max_frame_bytes, self.output.max_return_bytes + 64 * 1024)
        self._runtime_dir = Path(tempfile.mkdtemp(prefix="bamboo-sandbox-rt-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._runtime_dir), True)
        os.chmod(self._runtime_dir, 0o755)
        runner_copy = self._runtime_dir / "child_runner.py"
        shutil.copyfile(CHILD_RUNNER_SOURCE, runner_copy)
        os.chmod(runner_copy, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        self.plan: LaunchPlan = plan_launch(
            mode=isolation,
            python=python,
            runner_path=str(runner_copy),
            limits=self.limits,
            sandbox_uid=sandbox_uid,
            sandbox_gid=sandbox_gid,
        )
        self._pool: deque[_Child] = deque()
        self._refills: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def isolation(self) -> Isolation:
        return self.plan.isolation

    @property
    def warnings(self) -> list[str]:
        return list(self.plan.warnings)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Fill the warm pool (no-op when pool_size is 0)."""
        while len(self._pool) < self.pool_size:
            self._pool.append(await self._spawn())

    async def ready(self) -> None:
        """Wait until the warm pool is full again (refills run in the background after each run)."""
        while self._refills:
            await asyncio.gather(*list(self._refills), return_exceptions=True)
        await self.start()

    async def close(self) -> None:
        self._closed = True
        for task in list(self._refills):
            task.cancel()
        for task in list(self._refills):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        while self._pool:
            await self._dispose(self._pool.popleft())
        self._finalizer()

    async def __aenter__(self) -> "SandboxRunner":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- spawning -----------------------------------------------------------------------------
    async def _spawn(self) -> _Child:
        """Start one child and wait for its ``ready`` frame; on any failure or cancellation leave nothing behind."""
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        workdir: Path | None = None
        proc: asyncio.subprocess.Process | None = None
        try:
            if self.plan.isolation == "degraded":
                workdir = Path(tempfile.mkdtemp(prefix="bamboo-sandbox-run-"))
                os.chmod(workdir, 0o700)
                if self.plan.uid is not None:
                    os.chown(workdir, self.plan.uid, self.plan.gid if self.plan.gid is not None else -1)
            env = dict(self.plan.env)
            if workdir is not None:
                env.update({"HOME": str(workdir), "TMPDIR": str(workdir), CHILD_TAG_ENV: secrets.token_hex(8)})
            argv = self.plan.argv(child_sock.fileno(), self.limits)
            extra: dict[str, Any] = {}
            if self.plan.uid is not None:
                extra.update(user=self.plan.uid, group=self.plan.gid, extra_groups=[])
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    pass_fds=(child_sock.fileno(),),
                    close_fds=True,
                    start_new_session=True,
                    env=env,
                    cwd=str(workdir) if workdir is not None else "/",
                    **extra,
                )
            except OSError as exc:
                raise SandboxUnavailable(f"could not start the sandbox child ({argv[0]}): {exc}") from exc
            finally:
                child_sock.close()
            reader, writer = await asyncio.open_unix_connection(sock=parent_sock, limit=self.max_frame_bytes)
            child = _Child(proc, parent_sock, reader, writer, workdir, asyncio.get_running_loop(), self.plan.isolation)
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
            with contextlib.suppress(OSError):
                parent_sock.close()
            _remove(workdir)
            raise

    async def _take(self) -> tuple[_Child, bool]:
        loop = asyncio.get_running_loop()
        while self._pool:
            child = self._pool.popleft()
            if child.alive and child.loop is loop:
                return child, True
            await self._dispose(child)
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
        stub_source, _ = generate_stub_module(bridge.bridged_specs, bridge.catalogue_names)
        limit_hit = asyncio.Event()
        stdout = CappedStream(self.output.capture_bytes, limit_hit.set)
        stderr = CappedStream(self.output.capture_bytes, limit_hit.set)
        done: dict[str, Any] = {}
        ending: Ending = "exited"
        tasks: list[asyncio.Task[Any]] = []
        try:
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
            serve = asyncio.create_task(self._serve(child, bridge, done))
            exited = asyncio.create_task(child.proc.wait())
            limit_wait = asyncio.create_task(limit_hit.wait())
            tasks += [serve, exited, limit_wait]
            pending: set[asyncio.Task[Any]] = {serve, exited, limit_wait}
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ending = "timeout"
                    break
                finished, pending = await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                if limit_wait in finished:
                    ending = "output_limit"
                    break
                if serve in finished:
                    ending = "protocol_error" if serve.result() == "protocol_error" else ("done" if done else "exited")
                    if ending != "protocol_error":
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(asyncio.shield(exited), EXIT_GRACE_S)
                    break
                if exited in finished:
                    # Give the bridge a moment to deliver a done frame that was already written.
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(serve), 0.5)
                    ending = "done" if done else "exited"
                    break
        finally:
            bridge.close("the run has ended")
            await self._kill(child)
            await self._finish_streams(child, tasks[:2])
            for task in tasks[2:]:
                task.cancel()
            for task in tasks[2:]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self._dispose(child)
            # Refill after the run, not during it: a concurrent spawn would compete with the run for CPU.
            self._schedule_refill()
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
        )

    async def _serve(self, child: _Child, bridge: ToolBridge, done: dict[str, Any]) -> str:
        """Answer call frames until the child says done or the stream ends."""
        in_flight: set[asyncio.Task[None]] = set()

        async def answer(frame: dict[str, Any]) -> None:
            reply = await bridge.handle_call(frame)
            with contextlib.suppress(ConnectionError, RuntimeError):
                child.writer.write(encode_frame(reply))
                await child.writer.drain()

        try:
            while True:
                try:
                    frame = await read_frame(child.reader, self.max_frame_bytes)
                except ProtocolError as exc:
                    bridge.close(f"protocol error: {exc}")
                    log.warning("sandbox run %s: %s", bridge.run_id, exc)
                    return "protocol_error"
                except ConnectionError:
                    return "eof"
                if frame is None:
                    return "eof"
                kind = frame.get("type")
                if kind == "call":
                    task = asyncio.create_task(answer(frame))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                elif kind == "done":
                    if bridge.token_matches(frame):
                        done.update(frame)
                        return "done"
                    bridge.close("a done frame carried a wrong token")
                    return "protocol_error"
                else:
                    bridge.close(f"unexpected frame type {kind!r}")
                    return "protocol_error"
        finally:
            for task in list(in_flight):
                task.cancel()
            for task in list(in_flight):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

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
        """SIGKILL the child's process group and every descendant we can still see."""
        pid = child.proc.pid
        victims = _degraded_victims(pid, child.workdir) if child.isolation == "degraded" else []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        for victim in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(victim, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            child.proc.kill()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(child.proc.wait(), 5.0)

    async def _dispose(self, child: _Child) -> None:
        if child.alive:
            await self._kill(child)
        with contextlib.suppress(Exception):
            child.writer.close()
        with contextlib.suppress(OSError):
            child.sock.close()
        _remove(child.workdir)


def _degraded_victims(root: int, workdir: Path | None) -> list[int]:
    """Without a pid namespace, find the run's processes: its descendants, plus orphans that kept the
    run's tag in their environment or still sit in its work dir (a double-forked, setsid'ed daemon is
    reparented away from the tree). A script that also scrubs its environ block and leaves the work
    dir can still outlive the run in degraded mode; bwrap's pid namespace has no such gap."""
    victims = set(_descendants(root))
    tag = None
    if workdir is not None:
        with contextlib.suppress(OSError):
            with open(f"/proc/{root}/environ", "rb") as fh:
                tag = next((v for v in fh.read().split(b"\0") if v.startswith(CHILD_TAG_ENV.encode() + b"=")), None)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in victims or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if workdir is not None and os.readlink(f"/proc/{entry.name}/cwd").startswith(str(workdir)):
                victims.add(int(entry.name))
                continue
            if tag is not None:
                with open(f"/proc/{entry.name}/environ", "rb") as fh:
                    if tag in fh.read().split(b"\0"):
                        victims.add(int(entry.name))
    return sorted(victims)


def _descendants(root: int) -> list[int]:
    """Every live process whose parent chain reaches ``root`` (degraded mode has no pid namespace)."""
    children: dict[int, list[int]] = {}
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
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    stack = [root]
    while stack:
        for kid in children.get(stack.pop(), []):
            found.append(kid)
            stack.append(kid)
    return found


def _remove(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
