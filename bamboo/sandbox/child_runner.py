"""Sandbox child: runs one untrusted script body and talks to the parent over one inherited socket.

This file is executed by path with the system interpreter (``python3 -I -S -B child_runner.py FD
LIMITS``) inside the sandbox. It must stay standalone (stdlib only, no project imports): the child
cannot read the project's virtualenv, and nothing of the project should be importable in there.

Sequence: check that the bridge descriptor is the inherited AF_UNIX socket, apply the resource limits,
close every descriptor but the bridge, pre-import what a run needs (so a warm-pool child is ready), then
block until the parent sends the ``start`` frame with
the code, the per-run token and the generated tool-stub module. The script's body runs as the body
of an ``async def``; its return value must be a JSON-serialisable dict. Every frame the child sends
carries the token. The token binds frames to this run; it is not a secret from the script itself
(the script runs in this same process) — the parent's allow-set and validation are the boundary.

The child creates no socket: the seccomp filter refuses ``socket`` and ``socketpair`` for every family. So
the event loop (``PipeWokenLoop``) wakes itself through a pipe instead of asyncio's default socketpair.
"""

import ast
import asyncio
import json
import os
import resource
import socket
import stat
import struct
import sys
import traceback
import types

HEADER = struct.Struct(">I")
MAX_INBOUND_FRAME = 16 * 1024 * 1024
MAX_ERROR_CHARS = 4000


class ToolError(Exception):
    """A bridged tool call failed (the tool reported an error, timed out, or its result was too large)."""


class ToolDenied(ToolError, PermissionError):
    """The parent refused the call: tool not allowed in this run, bad arguments, or limits reached."""


def apply_limits(limits):
    pairs = [
        (resource.RLIMIT_CPU, limits["cpu_seconds"], limits["cpu_seconds"] + 1),
        (resource.RLIMIT_AS, limits["memory_bytes"], limits["memory_bytes"]),
        (resource.RLIMIT_NPROC, limits["max_processes"], limits["max_processes"]),
        (resource.RLIMIT_FSIZE, limits["max_file_bytes"], limits["max_file_bytes"]),
        (resource.RLIMIT_NOFILE, limits["max_open_files"], limits["max_open_files"]),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    for which, soft, hard in pairs:
        resource.setrlimit(which, (soft, hard))


def recv_exact_blocking(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise EOFError("bridge closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame_blocking(sock):
    (size,) = HEADER.unpack(recv_exact_blocking(sock, HEADER.size))
    if size > MAX_INBOUND_FRAME:
        raise ValueError("frame too large")
    return json.loads(recv_exact_blocking(sock, size).decode("utf-8"))


def encode_frame(message):
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return HEADER.pack(len(body)) + body


class BridgeClient:
    """Sends call frames and routes the parent's answers back to the awaiting stub by call id."""

    def __init__(self, sock, token):
        self._sock = sock
        self._token = token
        self._next_id = 0
        self._pending = {}
        self._reader = None
        self._writer = None
        self._listener = None

    async def open(self):
        self._reader, self._writer = await asyncio.open_connection(sock=self._sock)
        self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self):
        try:
            while True:
                header = await self._reader.readexactly(HEADER.size)
                (size,) = HEADER.unpack(header)
                if size > MAX_INBOUND_FRAME:
                    raise ValueError("frame too large")
                message = json.loads((await self._reader.readexactly(size)).decode("utf-8"))
                future = self._pending.pop(message.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(message)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ToolError("the tool bridge closed: %s" % (exc,)))
            self._pending.clear()

    async def call(self, name, arguments):
        self._next_id += 1
        call_id = self._next_id
        future = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        frame = {"type": "call", "token": self._token, "id": call_id, "tool": name, "args": arguments}
        try:
            self._writer.write(encode_frame(frame))
        except (TypeError, ValueError) as exc:
            self._pending.pop(call_id, None)
            raise ToolError("arguments for %r are not JSON-serialisable: %s" % (name, exc)) from None
        await self._writer.drain()
        answer = await future
        if answer.get("ok"):
            return answer.get("data")
        message = answer.get("error") or "tool call failed"
        if answer.get("denied"):
            raise ToolDenied(message)
        raise ToolError(message)

    async def finish(self, message):
        message["token"] = self._token
        self._writer.write(encode_frame(message))
        await self._writer.drain()


class PipeEnd:
    """One end of a pipe with the few socket methods asyncio's self-pipe calls (recv, send, close...)."""

    def __init__(self, fd):
        self._fd = fd

    def fileno(self):
        return self._fd

    def setblocking(self, flag):
        os.set_blocking(self._fd, flag)

    def recv(self, size):
        return os.read(self._fd, size)

    def send(self, data):
        return os.write(self._fd, data)

    def close(self):
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class PipeWokenLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop, woken through a pipe: its default self-pipe is a socketpair, which the
    sandbox's seccomp filter refuses (the child creates no socket)."""

    def _make_self_pipe(self):
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._ssock, self._csock = PipeEnd(read_fd), PipeEnd(write_fd)
        self._internal_fds += 1
        self._add_reader(read_fd, self._read_from_self)


def run_loop(main_coroutine):
    loop = PipeWokenLoop()
    asyncio.set_event_loop(loop)
    return loop.run_until_complete(main_coroutine)


def inherited_bridge(fd):
    """The bridge socket the parent passed down, or SystemExit: the child must not make one of its own."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        mode = 0
    if not stat.S_ISSOCK(mode):
        raise SystemExit(f"sandbox child: descriptor {fd} is not the inherited bridge socket")
    sock = socket.socket(fileno=fd)  # adopts the descriptor; no socket() call
    if sock.family != socket.AF_UNIX:
        raise SystemExit("sandbox child: the inherited bridge is not an AF_UNIX socket")
    return sock


def build_stub_module(name, source, bridge):
    module = types.ModuleType(name)
    module.__dict__["_bridge_call"] = bridge.call
    exec(compile(source, "<%s>" % name, "exec"), module.__dict__)
    sys.modules[name] = module
    return module


def compile_body(code):
    """The script is the body of ``async def __sandbox_main__()`` (so it may ``await`` and ``return``); line
    numbers stay the script's own.

    It must still mean what it means as the script the approver reads. In a function body the names it binds
    are the function's locals, and that changed which value a name has: a class body's ``all = all`` read the
    builtin, a name read before a later assignment raised instead of reading the builtin, ``global x`` in a
    def named another variable, and the annotation of ``flag: note(...) = v`` was never evaluated; each turned
    a guard off and a kill ran. So every name the script binds in its own scope is declared global (the
    namespace it runs in is its module's; the names are the compiler's own list of the function's locals),
    annotated assignments are evaluated as a module evaluates them, and ``__doc__`` is the script's docstring."""
    tree = ast.parse(code, filename="<sandbox>", mode="exec")
    body = [statement for node in tree.body for statement in _as_module_statements(node)] or [ast.Pass()]
    bound = _function_locals(_wrapped(body))
    if bound:
        body = [ast.copy_location(ast.Global(names=bound), body[0]), *body]
    return compile(_wrapped(body), "<sandbox>", "exec")


def _wrapped(body):
    wrapper = ast.parse("async def __sandbox_main__():\n    pass\n", mode="exec")
    wrapper.body[0].body = body
    return ast.fix_missing_locations(wrapper)


def _function_locals(wrapper):
    """The names the wrapped script binds in its own scope, as the compiler counts them (assignments, imports,
    defs, loop and walrus targets, match captures...)."""
    module = compile(wrapper, "<sandbox>", "exec")
    function = next(c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == "__sandbox_main__")
    return sorted(set(function.co_varnames) | set(function.co_cellvars))


def script_docstring(code):
    """What a module of the script would hold as ``__doc__``: the investigation puts ``task_id = N`` in front of
    the script (bamboo.investigation.code), which would otherwise make every docstring a plain statement."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if body and _is_task_preamble(body[0]):
        body = body[1:]
    return ast.get_docstring(ast.Module(body=body, type_ignores=[]), clean=False)


def _is_task_preamble(statement):
    return (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id == "task_id"
            and isinstance(statement.value, ast.Constant) and statement.lineno == 1)


def _slice_parts(part):
    """The expressions a subscript's index evaluates, in order (a slice's bounds, a tuple's items): a slice is
    no expression of its own outside the brackets."""
    if isinstance(part, ast.Slice):
        return [bound for bound in (part.lower, part.upper, part.step) if bound is not None]
    if isinstance(part, ast.Tuple):
        return [inner for item in part.elts for inner in _slice_parts(item)]
    return [part]


def _as_module_statements(node):
    """``node`` with its annotated assignments as a module evaluates them (the value, the assignment, then the
    annotation, or the target's parts then the annotation), outside nested functions and classes."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node]
    if isinstance(node, ast.AnnAssign):
        if node.value is not None:
            done = [ast.Assign(targets=[node.target], value=node.value)]
        elif isinstance(node.target, ast.Attribute):
            done = [ast.Expr(value=node.target.value)]
        elif isinstance(node.target, ast.Subscript):
            done = [ast.Expr(value=part) for part in (node.target.value, *_slice_parts(node.target.slice))]
        else:
            done = []
        return [ast.copy_location(statement, node) for statement in [*done, ast.Expr(value=node.annotation)]]
    for field in ("body", "orelse", "finalbody"):
        if isinstance(getattr(node, field, None), list):
            setattr(node, field, [s for child in getattr(node, field) for s in _as_module_statements(child)])
    for part in getattr(node, "handlers", None) or getattr(node, "cases", None) or ():
        part.body = [s for child in part.body for s in _as_module_statements(child)]
    return [node]


def json_ready(value):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError("the script must return a JSON-serialisable dict (or nothing), got %s" % type(value).__name__)
    json.dumps(value, allow_nan=False)
    return value


def short_traceback():
    text = traceback.format_exc()
    return text[-MAX_ERROR_CHARS:]


async def run_script(start, bridge):
    # Opened once, before the script runs: concurrent first calls must not race to open it.
    await bridge.open()
    module = build_stub_module(start["stub_module"], start["stub_source"], bridge)
    # The script's module is __main__, as for a script run as a program: under another name "if __name__ !=
    # '__main__':" guarded nothing, and with the runner as sys.modules["__main__"] pickle, dataclasses and
    # get_type_hints could not find the script's classes (a failed pickle turned a guard off). Its docstring
    # is its own (a "DRY RUN" docstring read as __doc__ was the builtins module's), and sys.argv names no
    # arguments (argparse read the runner's own).
    script = types.ModuleType("__main__", script_docstring(start["code"]))
    script.__dict__.update({"tools": module, "ToolError": ToolError, "ToolDenied": ToolDenied})
    sys.modules["__main__"] = script
    sys.argv[:] = ["<sandbox>"]
    namespace = script.__dict__
    try:
        exec(compile_body(start["code"]), namespace)
        value = json_ready(await namespace["__sandbox_main__"]())
        outcome = {"type": "done", "ok": True, "value": value}
    except BaseException:  # the script's own failure, reported to the parent as data
        outcome = {"type": "done", "ok": False, "error": short_traceback()}
    flush_streams()
    await bridge.finish(outcome)


def flush_streams():
    """Push the script's buffered output into the pipes before the result; a script may have broken them."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def main():
    fd = int(sys.argv[1])
    sock = inherited_bridge(fd)
    apply_limits(json.loads(sys.argv[2]))
    os.closerange(3, fd)
    os.closerange(fd + 1, 4096)
    sock.sendall(encode_frame({"type": "ready", "pid": os.getpid()}))
    try:
        start = read_frame_blocking(sock)
    except (EOFError, ValueError):
        return 0
    if start.get("type") != "start":
        return 2
    sock.setblocking(False)
    bridge = BridgeClient(sock, start["token"])
    run_loop(run_script(start, bridge))
    flush_streams()
    # The result is delivered; skip interpreter teardown (the parent is waiting for this exit).
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
