"""Work sized by an input runs off the worker's event loop, within a budget.

One event loop carries every activity of a worker: heartbeats, the sandbox bridge's tool calls, every
slice's model calls. Parsing an 8 MiB incident or scrubbing 8 MiB of a script's output on it once
stopped all of that for seconds to minutes: heartbeats were missed, so Temporal retried the activity
(the script ran again, a slice's model calls were paid again) and every other activity stalled.

Two ways off the loop, chosen by how the work holds the GIL:

- ``in_thread``: Python-level work in short steps (a JSON walk, a validation, a hash): the interpreter
  hands the GIL back to the loop every few milliseconds. It has a small pool of its own, so heavy inputs
  queue behind each other instead of taking every thread of the loop's default executor.
- ``in_child``: work that spends seconds inside single C calls that keep the GIL (a regular expression
  scanning megabytes). A thread would still stop the loop for as long as each call lasts (measured: 2 s
  gaps while scrubbing 4 MiB), so it runs in a child interpreter, which is killed when its budget ends.
  The child runs only the jobs ``bamboo.offload_child`` names, on the bytes it is given.

Both take a budget in seconds of wall time: past it the caller gets `BudgetExceeded` and decides what
that means for its item (an incident fails with the reason; output that cannot be scrubbed in time is
withheld, never shown unscrubbed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# Two threads: the GIL lets one of them run at a time anyway; the second keeps a small input from
# waiting behind a large one.
_POOL_THREADS = 2
_pool: ThreadPoolExecutor | None = None
# The directory holding the `bamboo` package: the child imports the project from there, however the
# worker was installed.
_PROJECT_ROOT = str(Path(__file__).resolve().parents[1])
_CHILD_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from bamboo.offload_child import main; main(sys.argv[2])"
# What a child may write back; more is a broken child, not a result.
MAX_CHILD_OUTPUT = 64 * 1024 * 1024


class BudgetExceeded(Exception):
    """The work did not finish within its budget (the thread's result is dropped; a child is killed)."""


class ChildFailed(Exception):
    """The child interpreter ended without a result (it crashed, or its job raised)."""


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_POOL_THREADS, thread_name_prefix="bamboo-offload")
    return _pool


async def in_thread(fn: Callable[..., T], /, *args: Any, budget_s: float, what: str) -> T:
    """``fn(*args)`` on the offload pool. Past ``budget_s`` raises `BudgetExceeded` naming ``what``;
    the thread then finishes on its own (callers bound the input, so it does), its result unused.
    Exceptions of ``fn`` are raised here unchanged."""
    future = asyncio.get_running_loop().run_in_executor(_executor(), lambda: fn(*args))
    try:
        return await asyncio.wait_for(asyncio.shield(future), budget_s)
    except TimeoutError:
        future.add_done_callback(_drop_result)
        raise BudgetExceeded(f"{what} took longer than {budget_s:g} s") from None


def _drop_result(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: an abandoned failure is not logged as "never retrieved"


async def in_child(job: str, payload: bytes, *, budget_s: float, what: str) -> bytes:
    """Run ``bamboo.offload_child``'s ``job`` on ``payload`` in a fresh interpreter and return what it
    wrote. Past ``budget_s`` the child is killed and `BudgetExceeded` raised; a child that fails raises
    `ChildFailed` with the last line it wrote on stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-c", _CHILD_BOOT, _PROJECT_ROOT, job,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(_exchange(proc, payload), budget_s)
    except TimeoutError:
        raise BudgetExceeded(f"{what} took longer than {budget_s:g} s") from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
    if proc.returncode != 0:
        last = (err.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1][:300]
        raise ChildFailed(f"{what} failed in its child process (exit {proc.returncode}): {last}")
    return out


async def _exchange(proc: asyncio.subprocess.Process, payload: bytes) -> tuple[bytes, bytes]:
    """Feed the payload and read both streams at once (a child blocked on a full pipe never ends)."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin = proc.stdin

    async def feed() -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(payload)
            await stdin.drain()
            stdin.close()

    async def read(stream: asyncio.StreamReader, limit: int) -> bytes:
        data = bytearray()
        while chunk := await stream.read(64 * 1024):
            if len(data) + len(chunk) > limit:
                raise ChildFailed(f"the child wrote more than {limit} bytes")
            data += chunk
        return bytes(data)

    _, out, err = await asyncio.gather(feed(), read(proc.stdout, MAX_CHILD_OUTPUT), read(proc.stderr, 64 * 1024))
    await proc.wait()
    return out, err
