"""Issue 28, item 7: the child creates no socket, and a degraded run leaves nothing on the host's filesystems.

The bridge is inherited, so the filter refuses ``socket`` and ``socketpair`` for every family, AF_UNIX included;
in degraded mode a host Unix socket (a path or an abstract name) used to be reachable. After a degraded run,
everything its uid owns in any world-writable place is removed: a file left in /run/lock survived, and a later
run with the same uid read it.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import shutil
import socket
from pathlib import Path

import pytest

from tests.sandbox.conftest import harness, unique_limits

CONNECT = """
import errno, socket
out = {}
for name, family in (("unix", socket.AF_UNIX), ("inet", socket.AF_INET)):
    try:
        socket.socket(family, socket.SOCK_STREAM).close()
        out[name] = "created"
    except OSError as exc:
        out[name] = errno.errorcode[exc.errno]
try:
    socket.socketpair()
    out["socketpair"] = "created"
except OSError as exc:
    out["socketpair"] = errno.errorcode[exc.errno]
for label, target in (("path", PATH), ("abstract", ABSTRACT)):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(target)
        s.sendall(b"hello from the sandbox")
        out[label] = "connected"
    except OSError as exc:
        out[label] = type(exc).__name__
return out
"""


async def test_no_socket_of_any_family_and_no_host_unix_socket(sandbox):
    folder = Path("/tmp", f"bamboo-sock-{secrets.token_hex(6)}")
    folder.mkdir()
    folder.chmod(0o777)
    path = str(folder / "host.sock")
    abstract = f"\0bamboo-test-{secrets.token_hex(6)}"
    connections: list[bytes] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(await reader.read(100))
        writer.close()

    servers = [await asyncio.start_unix_server(on_connect, path=path),
               await asyncio.start_unix_server(on_connect, path=abstract)]
    os.chmod(path, 0o777)
    try:
        res = await sandbox.run(CONNECT.replace("PATH", repr(path)).replace("ABSTRACT", repr(abstract)))
    finally:
        for server in servers:
            server.close()
            await server.wait_closed()
        shutil.rmtree(folder, ignore_errors=True)
    assert res.status == "ok", res.error
    out = res.return_value
    assert out["unix"] == out["inet"] == out["socketpair"] == "EAFNOSUPPORT", out
    assert "connected" not in out.values() and connections == []


async def test_the_bridge_still_works_without_sockets(sandbox):
    """asyncio's loop wakes itself through a socketpair by default; the child's loop uses a pipe instead."""
    res = await sandbox.run("""
import asyncio
async def one(i):
    await asyncio.sleep(0)
    return (await tools.get_task(task_id=i))["task_id"]
return {"ids": await asyncio.gather(*(one(i) for i in range(3)))}
""")
    assert res.status == "ok", res.error
    assert res.return_value == {"ids": [0, 1, 2]}


LEAVE = """
import os
left = []
for folder in {folders!r}:
    try:
        os.makedirs(folder + "/{name}-dir/deeper", exist_ok=True)
        with open(folder + "/{name}-dir/deeper/note", "w") as fh:
            fh.write("{secret}")
        with open(folder + "/{name}", "w") as fh:
            fh.write("{secret}")
        os.chmod(folder + "/{name}", 0o600)
        left.append(folder)
    except OSError:
        pass
return {{"left": left}}
"""

READ = """
import os
found = {{}}
for folder in {folders!r}:
    for path in (folder + "/{name}", folder + "/{name}-dir/deeper/note"):
        try:
            with open(path) as fh:
                found[path] = fh.read()
        except OSError as exc:
            found[path] = type(exc).__name__
return found
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per run needs a root worker")
async def test_a_later_run_with_the_same_uid_finds_nothing_left(mode):
    """Both runs get the same uid (a range of one); what the first left in world-writable places — /run/lock,
    a world-writable directory nested in a directory the run cannot write — is gone before the second starts."""
    nest = Path("/var/tmp", f"bamboo-nest-{secrets.token_hex(6)}")
    nest.mkdir(mode=0o755)
    inner = nest / "shared"
    inner.mkdir()
    inner.chmod(0o1777)
    folders = [str(p) for p in (Path("/run/lock"), inner, Path("/var/tmp"), Path("/dev/shm")) if p.is_dir()]
    name = f"bamboo-left-{secrets.token_hex(6)}"
    secret = secrets.token_hex(12)
    first_uid = 1_500_000_000 + random.randrange(1_000_000)
    try:
        async with harness(mode, limits=unique_limits(), uid_first=first_uid, uid_count=1) as h:
            first = await h.run(LEAVE.format(folders=folders, name=name, secret=secret))
            assert first.status == "ok", first.error
            if mode == "degraded":
                assert first.return_value["left"] == folders  # it could write there ...
            leftovers = [str(p) for folder in folders for p in Path(folder).glob(name + "*")]
            assert leftovers == []  # ... and nothing of it is left
            second = await h.run(READ.format(folders=folders, name=name))
            assert second.status == "ok", second.error
            assert secret not in repr(second.return_value)
    finally:
        shutil.rmtree(nest, ignore_errors=True)
        for folder in folders:
            for p in Path(folder).glob(name + "*"):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def test_every_socket_family_is_refused_by_the_filter_program():
    """The very program both modes install (bwrap's --seccomp, degraded's preexec), outside any sandbox."""
    import subprocess

    from bamboo.sandbox.seccomp import ChildInstaller, filter_program

    probe = ("import errno, socket\n"
             "out = []\n"
             "for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):\n"
             "    try:\n        socket.socket(family, socket.SOCK_DGRAM)\n        out.append('created')\n"
             "    except OSError as exc:\n        out.append(errno.errorcode[exc.errno])\n"
             "try:\n    socket.socketpair()\n    out.append('created')\n"
             "except OSError as exc:\n    out.append(errno.errorcode[exc.errno])\n"
             "print(' '.join(out))\n")
    done = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", probe], preexec_fn=ChildInstaller(filter_program()),
                          capture_output=True, text=True, timeout=30, env={}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["EAFNOSUPPORT"] * 5
    assert socket.socket  # the worker itself keeps its sockets
