"""Work sized by an input runs off the worker's event loop, within a budget.

One event loop carries every activity of a worker: heartbeats, the sandbox bridge's tool calls, every
slice's model calls. Parsing an 8 MiB incident or scrubbing 8 MiB of a script's output on it once
stopped all of that for seconds to minutes: heartbeats were missed, so Temporal retried the activity
(the script ran again, a slice's model calls were paid again) and every other activity stalled.

Two ways off the loop, chosen by how the work holds the GIL:

- ``in_thread``: Python-level work in short steps (a JSON walk, a validation in Python mode, a hash of
  a large buffer): the interpreter hands the GIL back to the loop every few milliseconds. **Only** that:
  a single C call keeps the GIL for as long as it lasts, thread or not (``re`` on a long text, the C
  ``json`` codec, pydantic-core's ``model_validate_json``/``model_dump_json``), so it stops the loop all
  the same, and the loop cannot even run the budget's timer meanwhile. A call of that kind that can
  last more than about 50 ms belongs in ``in_child``, or must be made smaller.
- ``in_child``: work that spends long stretches inside single C calls that keep the GIL (a regular
  expression scanning megabytes, decoding megabytes of JSON). It runs in a child interpreter, which is
  killed when its budget ends. The child runs only the jobs ``bamboo.offload_child`` names, on the
  bytes it is given.

Both take a budget in seconds of wall time: past it the caller gets `BudgetExceeded` and decides what
that means for its item (an incident fails with the reason; output that cannot be scrubbed in time is
withheld, never shown unscrubbed).

**Threads and their budgets.** A thread cannot be stopped, so a job past its budget (or whose caller was
cancelled) is *abandoned*: it runs on to its end, and nobody waits for its result. Each job gets a thread of its
own, and at most ``_POOL_THREADS`` jobs per event loop run that somebody still waits for; a caller waiting for
one of those places has not started, and its budget counts only once its job does. An abandoned job gives its
place up at once, so runaways never make unrelated work wait (before, two of them held both threads of a fixed
pool, and a 1 ms job queued behind them ran out of its 1 s budget). What bounds runaways is ``_MAX_THREADS``,
the threads running in all, abandoned ones included (each burns CPU to its end): when they are all taken, new
work fails at once with `OffloadBusy` (a `BudgetExceeded`, so each caller treats it as a spent budget). A thread
per job costs tens of microseconds to start, nothing beside the work this is for.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import pickle
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# Jobs somebody waits for, per event loop: the GIL lets one of them run at a time anyway; the second keeps a
# small input from waiting behind a large one.
_POOL_THREADS = 2
# Threads at most, those still running abandoned jobs included (each of which burns CPU to its end); with all
# of them taken, new work is refused (`OffloadBusy`).
_MAX_THREADS = 6
# The directory holding the `bamboo` package: the child imports the project from there, however the
# worker was installed.
_PROJECT_ROOT = str(Path(__file__).resolve().parents[1])
_CHILD_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from bamboo.offload_child import main; main(sys.argv[2])"
# What a child may write back; more is a broken child, not a result.
MAX_CHILD_OUTPUT = 64 * 1024 * 1024


class BudgetExceeded(Exception):
    """The work did not finish within its budget (the thread's result is dropped; a child is killed)."""


class OffloadBusy(BudgetExceeded):
    """The work was not started: every thread of the offload pool is still running a job past its budget."""


class ChildFailed(Exception):
    """The child interpreter ended without a result (it crashed, or its job raised)."""


_lock = threading.Lock()
_alive = 0  # threads running a job, abandoned ones included
# Per event loop: its callers' places among the jobs somebody waits for (asyncio primitives belong to one loop).
_places: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _place() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    if loop not in _places:
        _places[loop] = asyncio.Semaphore(_POOL_THREADS)
    return _places[loop]


def _start(call: Callable[[], Any], future: asyncio.Future[Any], what: str) -> None:
    """Run ``call`` on a thread of its own, its outcome settled on ``future``'s loop; `OffloadBusy` instead when
    ``_MAX_THREADS`` threads are running already."""
    global _alive
    with _lock:
        if _alive >= _MAX_THREADS:
            raise OffloadBusy(f"{what} was not started: all {_alive} threads of the offload pool are still running "
                              "jobs past their budgets")
        _alive += 1
    loop = future.get_loop()

    def run() -> None:
        global _alive
        value: Any = None
        error: BaseException | None = None
        try:
            value = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller unchanged
            error = exc
        finally:
            with _lock:
                _alive -= 1
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody to tell
            loop.call_soon_threadsafe(_settle, future, value, error)

    threading.Thread(target=run, name="bamboo-offload", daemon=True).start()


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # its caller stopped waiting
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


async def in_thread(fn: Callable[..., T], /, *args: Any, budget_s: float, what: str) -> T:
    """``fn(*args)`` on a thread, for Python-level work only (see the module's docstring). The budget counts from
    when the job starts, not while it waits for a place; past it raises `BudgetExceeded` naming ``what``, and the
    thread finishes on its own (callers bound the input, so it does), its result unused and its place given up.
    `OffloadBusy` when abandoned jobs hold every thread there may be. Exceptions of ``fn`` are raised here
    unchanged."""
    async with _place():
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        _start(lambda: fn(*args), future, what)
        try:
            return await asyncio.wait_for(asyncio.shield(future), budget_s)
        except TimeoutError:
            future.add_done_callback(_drop_result)
            raise BudgetExceeded(f"{what} took longer than {budget_s:g} s") from None
        except BaseException:
            future.add_done_callback(_drop_result)
            raise


def _drop_result(future: asyncio.Future[Any]) -> None:
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


class _PlainUnpickler(pickle.Unpickler):
    """Loads lists, dicts, strings, numbers, booleans and None; refuses every other type (``find_class``), so even a
    child that went wrong cannot make the parent build an object or call anything."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a child's answer holds only plain data, not {module}.{name}")


def load_plain(data: bytes) -> Any:
    """A value a child pickled (``bamboo.offload_child``'s decode jobs): one C call, several times faster than
    decoding the same value from JSON, and no type beyond plain data is ever built. `ChildFailed` when ``data`` is
    not such a value."""
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - whatever the bytes were, the child's answer is unusable
        raise ChildFailed(f"the child's answer could not be loaded: {type(exc).__name__}: {str(exc)[:200]}") from None


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
