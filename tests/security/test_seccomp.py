"""Item: a seccomp filter denies ptrace, process_vm_*, keyctl, bpf, userfaultfd, mount, memfds, SysV and POSIX
ipc objects and every socket family, AF_UNIX included (issue 28: the child creates no socket; its bridge is
inherited); ``_cffi_backend`` is blocked like ``_ctypes``."""

from __future__ import annotations

import asyncio
import json
import subprocess

from bamboo.sandbox.seccomp import ChildInstaller, filter_program

# Raw system calls through ctypes: what a script could do with any FFI module it managed to load.
SYSCALLS = r"""
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())
buf = ctypes.create_string_buffer(64)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 64)
out = {
    "ptrace": call(101, 0, 0, 0, 0),                      # PTRACE_TRACEME
    "process_vm_readv": call(310, os.getppid(), ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0),
    "process_vm_writev": call(311, os.getppid(), ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0),
    "keyctl": call(250, 0, 0, 0, 0, 0),                    # KEYCTL_GET_KEYRING_ID
    "add_key": call(248, 0, 0, 0, 0, 0),
    "bpf": call(321, 0, 0, 0),
    "userfaultfd": call(323, 0),
    "mount": call(165, 0, 0, 0, 0, 0),
    "umount2": call(166, 0, 0),
    "unshare_user": call(272, 0x10000000),                 # CLONE_NEWUSER
    "unshare_net": call(272, 0x40000000),
    "io_uring_setup": call(425, 8, ctypes.addressof(ctypes.create_string_buffer(120))),
    "perf_event_open": call(298, 0, 0, -1, -1, 0),
    "clone3": call(435, 0, 0),
    "memfd_create": call(319, ctypes.addressof(ctypes.create_string_buffer(b"x")), 0),
    "shmget": call(29, 0, 4096, 0o1600),                    # IPC_PRIVATE | IPC_CREAT
    "msgget": call(68, 0, 0o1600),
    "semget": call(64, 0, 1, 0o1600),
    "mq_open": call(240, ctypes.addressof(ctypes.create_string_buffer(b"bamboo-test")), 0o100 | 2, 0o600, 0),
    # using IPC objects someone else made (allowed, these bad ids would answer EINVAL or EBADF)
    "msgsnd": call(69, -1, 0, 0, 0), "msgrcv": call(70, -1, 0, 0, 0, 0), "msgctl": call(71, -1, 2, 0),
    "semop": call(65, -1, 0, 0), "semtimedop": call(220, -1, 0, 0, 0), "semctl": call(66, -1, 0, 2, 0),
    "shmctl": call(31, -1, 2, 0),
    "mq_timedsend": call(242, -1, 0, 0, 0, 0), "mq_timedreceive": call(243, -1, 0, 0, 0, 0),
    "mq_notify": call(244, -1, 0), "mq_getsetattr": call(245, -1, 0, 0),
    "mq_unlink": call(241, ctypes.addressof(ctypes.create_string_buffer(b"bamboo-test"))),
    # extended attributes hold kernel memory on tmpfs that no file's size shows (bad pointers: EFAULT if allowed)
    "setxattr": call(188, 0, 0, 0, 0, 0), "lsetxattr": call(189, 0, 0, 0, 0, 0), "fsetxattr": call(190, -1, 0, 0, 0, 0),
}
for family in ("AF_INET", "AF_INET6", "AF_VSOCK", "AF_NETLINK", "AF_PACKET", "AF_UNIX"):
    try:
        socket.socket(getattr(socket, family), socket.SOCK_DGRAM).close()
        out[family] = "ok"
    except OSError as exc:
        out[family] = errno.errorcode[exc.errno]
try:
    socket.socketpair()
    out["socketpair"] = "ok"
except OSError as exc:
    out["socketpair"] = errno.errorcode[exc.errno]
print(json.dumps(out) if "json" in globals() else out)
"""
EXPECTED = {
    "ptrace": "EPERM", "process_vm_readv": "EPERM", "process_vm_writev": "EPERM", "keyctl": "EPERM",
    "add_key": "EPERM", "bpf": "EPERM", "userfaultfd": "EPERM", "mount": "EPERM", "umount2": "EPERM",
    "unshare_user": "EPERM", "unshare_net": "EPERM", "io_uring_setup": "EPERM", "perf_event_open": "EPERM",
    "clone3": "ENOSYS", "memfd_create": "EPERM", "shmget": "EPERM", "msgget": "EPERM", "semget": "EPERM",
    "mq_open": "EPERM", "msgsnd": "EPERM", "msgrcv": "EPERM", "msgctl": "EPERM", "semop": "EPERM",
    "semtimedop": "EPERM", "semctl": "EPERM", "shmctl": "EPERM", "mq_timedsend": "EPERM", "mq_timedreceive": "EPERM",
    "mq_notify": "EPERM", "mq_getsetattr": "EPERM", "mq_unlink": "EPERM",
    "setxattr": "EPERM", "lsetxattr": "EPERM", "fsetxattr": "EPERM", "AF_INET": "EAFNOSUPPORT", "AF_INET6": "EAFNOSUPPORT", "AF_VSOCK": "EAFNOSUPPORT",
    "AF_NETLINK": "EAFNOSUPPORT", "AF_PACKET": "EAFNOSUPPORT", "AF_UNIX": "EAFNOSUPPORT", "socketpair": "EAFNOSUPPORT",
}


async def test_the_filter_is_in_force(sandbox):
    res = await sandbox.run(
        "status = open('/proc/self/status').read().splitlines()\n"
        "return {l.split(':')[0]: l.split(':')[1].strip() for l in status if l.startswith('Seccomp') or l.startswith('NoNewPrivs')}"
    )
    assert res.status == "ok", res.error
    assert res.return_value["Seccomp"] == "2"  # filter mode
    assert int(res.return_value["Seccomp_filters"]) >= 1
    assert res.return_value["NoNewPrivs"] == "1"


async def test_dangerous_system_calls_are_refused(sandbox, mode):
    if mode == "degraded":  # ctypes is there: make the calls from inside the run itself
        res = await sandbox.run("import json\n" + SYSCALLS.replace("print(json.dumps(out) if \"json\" in globals() else out)", "return out"))
        assert res.status == "ok", res.error
        assert res.return_value == EXPECTED
        return
    # bwrap: no FFI module loads inside, so no raw system call can be made there at all ...
    res = await sandbox.run("try:\n    import ctypes\n    return {'ctypes': 'loaded'}\nexcept ImportError:\n    return {'ctypes': 'blocked'}")
    assert res.return_value == {"ctypes": "blocked"}
    # ... and the very program bwrap installs (--seccomp FD) refuses them anyway.
    installer = ChildInstaller(filter_program())
    done = await asyncio.to_thread(
        subprocess.run, ["/usr/bin/python3", "-I", "-c", "import json\n" + SYSCALLS], preexec_fn=installer,
        capture_output=True, text=True, timeout=30, env={},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == EXPECTED


async def test_no_socket_of_any_family_inside_the_run(sandbox):
    code = """
import socket, errno
out = {}
for family in ("AF_INET", "AF_INET6", "AF_VSOCK", "AF_NETLINK", "AF_PACKET", "AF_UNIX"):
    try:
        socket.socket(getattr(socket, family), socket.SOCK_DGRAM).close()
        out[family] = "created"
    except OSError as exc:
        out[family] = errno.errorcode[exc.errno]
try:
    socket.socketpair()
    out["socketpair"] = "created"
except OSError as exc:
    out["socketpair"] = errno.errorcode[exc.errno]
return out
"""
    res = await sandbox.run(code)
    assert res.status == "ok", res.error
    assert set(res.return_value.values()) == {"EAFNOSUPPORT"}


async def test_a_loopback_service_is_unreachable(sandbox):
    connections = []

    async def on_connect(reader, writer):
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        res = await sandbox.run(f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
    return {{"connected": True}}
except OSError as exc:
    return {{"connected": False, "error": type(exc).__name__}}
""")
    finally:
        server.close()
        await server.wait_closed()
    assert res.status == "ok", res.error
    assert res.return_value["connected"] is False and connections == []


async def test_cffi_backend_is_blocked_like_ctypes(sandbox, mode):
    code = """
import importlib.machinery, importlib.util, os, sys
found, loaded = [], []
for root in ("/usr/lib", "/usr/lib64", "/usr/local/lib"):
    for folder, dirs, files in os.walk(root):
        for name in files:
            if name.startswith(("_cffi_backend", "_ctypes")) and name.endswith(".so"):
                found.append(os.path.join(folder, name))
for path in found:
    try:
        loader = importlib.machinery.ExtensionFileLoader(os.path.basename(path).split(".")[0], path)
        spec = importlib.util.spec_from_file_location(loader.name, path, loader=loader)
        importlib.util.module_from_spec(spec)
        loaded.append(path)
    except Exception:
        pass
sys.path.append("/usr/lib/python3/dist-packages")
try:
    import _cffi_backend
    by_import = "loaded"
except ImportError:
    by_import = "blocked"
return {"found": found, "loaded": loaded, "by_import": by_import}
"""
    res = await sandbox.run(code, timeout_s=30)
    assert res.status == "ok", res.error
    if mode == "bwrap":
        assert res.return_value["loaded"] == [] and res.return_value["by_import"] == "blocked"
    else:
        # Degraded mode cannot hide host files: FFI loads, and the seccomp filter is what holds
        # (test_dangerous_system_calls_are_refused makes the calls through ctypes in this mode).
        assert res.isolation == "degraded"
