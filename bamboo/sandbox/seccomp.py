"""The seccomp filter every sandbox child runs under, compiled once with libseccomp (``pyseccomp``).

Namespaces and a uid drop decide what a child can *see*; the filter decides which kernel interfaces it can *touch*
at all. Everything a Python script legitimately needs stays allowed (the default action is allow); the calls below
fail with EPERM, because each is either a way to reach another process (ptrace, process_vm_*, pidfd_getfd), a large
kernel attack surface that no script needs (bpf, userfaultfd, io_uring, keyrings, perf, module loading), or a way to
rebuild a view the sandbox took away (mount and friends, new namespaces), or a way out of the run's process group
(``setsid``, ``setpgid``), or a way to hold memory the run's total cannot see or that outlives the run
(``memfd_create``, ``memfd_secret``, SysV shared memory, message queues and semaphores, POSIX message queues: in
degraded mode the last four live in the host's ipc namespace; extended attributes, whose values on tmpfs are memory
no file's size shows). Preallocation (``fallocate`` and the ioctls that do the same) fails with EOPNOTSUPP instead
(below). ``socket`` and ``socketpair`` fail with EAFNOSUPPORT for every family, AF_UNIX included: the child's only
channel, the bridge, is a socket it inherits, and its event loop wakes itself through a pipe (``child_runner``), so
a run needs no socket of its own — and in degraded mode an AF_UNIX socket would reach the host's services (by path
or abstract name). Calls of a foreign ABI (i386 ``int 0x80``, x32) kill the process: libseccomp's filter only admits
the native architecture.

With bubblewrap the program is handed over with ``--seccomp FD`` and bwrap installs it right before it
executes the interpreter; in degraded mode the worker installs it in the forked child before ``exec``
(``install_in_child``), after the uid drop.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import tempfile

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

DENIED_SYSCALLS: tuple[str, ...] = (
    # reaching into other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    # kernel interfaces no script needs
    "bpf", "userfaultfd", "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "iopl", "ioperm", "syslog", "acct", "swapon", "swapoff", "reboot",
    "quotactl", "lookup_dcookie", "vhangup", "personality",
    # rebuilding the filesystem view or the namespaces
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "unshare", "setns", "open_by_handle_at", "name_to_handle_at",
    # memory no process maps (the watchdog cannot see it) or that outlives the run (host ipc namespace)
    "memfd_create", "memfd_secret", "shmget", "shmat", "msgget", "msgsnd", "semget", "mq_open",
    # and using such objects another process made: in degraded mode the host's, with loose modes, or a queue
    # opened by path where the host mounts the mqueue filesystem (open(O_CREAT) there makes one without mq_open)
    "shmctl", "msgrcv", "msgctl", "semop", "semtimedop", "semctl",
    "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr", "mq_unlink",
    # extended attributes: on tmpfs their values are kernel memory no file's blocks show (256 MiB parked in
    # user.* attributes passed a 64 MiB run total); no script needs to set one
    "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
    # leaving the run's process group: the runner ends a run with killpg, which the kernel applies to every member
    # at once, whatever they fork meanwhile. A process in a session of its own that forked and exited over and over
    # changed its pid faster than the /proc scan after it could follow, and in degraded mode ran on under a uid
    # given back to the pool (review). No script needs a session or a group of its own.
    "setsid", "setpgid",
)
# Taking disk without writing it. One fallocate reserved 2 GiB in 2 ms, past RLIMIT_FSIZE (FALLOC_FL_KEEP_SIZE
# leaves the file's size, all that limit reads, at 0), and a loop of them took 6 GiB of the host's disk in 22 ms
# in degraded mode, far faster than any watchdog polls. The generic preallocation ioctls (FS_IOC_RESVSP,
# FS_IOC_RESVSP64, FS_IOC_ZERO_RANGE) reach the same code without the fallocate call, XFS's ALLOCSP ones likewise
# before Linux 5.17. They answer EOPNOTSUPP, what a filesystem without preallocation answers: glibc's
# posix_fallocate then writes a byte per block itself, so callers still work, within RLIMIT_FSIZE per file and
# at the speed of writing (~0.4 GiB/s against ~65 GiB/s on the test host): the degraded watchdog's disk count,
# every 0.2 s, then stops a run a few hundred MiB past its cap rather than gigabytes. An ioctl's command is 32
# bits: the kernel ignores the upper half of the argument, so the rule compares the lower half only.
PREALLOCATING_SYSCALLS = ("fallocate",)
PREALLOCATING_IOCTLS = (
    0x40305828,  # FS_IOC_RESVSP
    0x4030582A,  # FS_IOC_RESVSP64
    0x40305839,  # FS_IOC_ZERO_RANGE
    0x4030580A,  # XFS_IOC_ALLOCSP (before Linux 5.17)
    0x40305824,  # XFS_IOC_ALLOCSP64 (before Linux 5.17)
)
IOCTL_COMMAND_MASK = 0xFFFFFFFF
# Refused whatever the family: the child creates no socket (see the module docstring).
SOCKET_SYSCALLS = ("socket", "socketpair")
# clone() may not create namespaces; clone3 hides its flags in memory the filter cannot read, so it
# answers ENOSYS and the C library falls back to clone().
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


class SeccompUnavailable(RuntimeError):
    """libseccomp could not be loaded or could not compile the filter; the message says what to install."""


@functools.lru_cache(maxsize=1)
def filter_program() -> bytes:
    """The compiled classic-BPF program (native architecture), as bwrap's ``--seccomp`` expects it."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError, OSError) as exc:
        raise SeccompUnavailable(
            f"the sandbox's seccomp filter needs libseccomp ({exc}); install it with "
            "`apt-get install -y libseccomp2` and the Python package with `make install`"
        ) from exc
    filt = sc.SyscallFilter(sc.ALLOW)
    filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    denied = sc.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        _add(sc, filt, denied, name)
    for name in SOCKET_SYSCALLS:
        _add(sc, filt, sc.ERRNO(errno.EAFNOSUPPORT), name)
    unsupported = sc.ERRNO(errno.EOPNOTSUPP)
    for name in PREALLOCATING_SYSCALLS:
        _add(sc, filt, unsupported, name)
    for command in PREALLOCATING_IOCTLS:
        _add(sc, filt, unsupported, "ioctl", sc.Arg(1, sc.MASKED_EQ, IOCTL_COMMAND_MASK, command))
    for flag in CLONE_NAMESPACE_FLAGS:
        _add(sc, filt, denied, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    _add(sc, filt, sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as fh:
        try:
            filt.export_bpf(fh)
        except OSError as exc:
            raise SeccompUnavailable(f"libseccomp could not compile the sandbox filter: {exc}") from exc
        fh.seek(0)
        program = fh.read()
    if not program or len(program) % 8:
        raise SeccompUnavailable("libseccomp produced no usable filter program")
    return program


def _add(sc, filt, action: int, name: str, *args) -> None:  # noqa: ANN001 - pyseccomp is untyped
    """Add one rule; a syscall this libseccomp does not know does not exist on the kernels it targets."""
    try:
        number = sc.resolve_syscall(sc.Arch.NATIVE, name)
    except (OSError, ValueError):
        return
    if number < 0:
        return
    filt.add_rule(action, name, *args)


def program_fd(program: bytes) -> int:
    """A fresh, readable descriptor holding the program from offset 0 (bwrap reads it to EOF once)."""
    fd = os.memfd_create("bamboo-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _SockFilterProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class ChildInstaller:
    """Installs the program in a forked child before ``exec`` (the ``preexec_fn`` of degraded mode).

    Everything is prepared in the parent — the program buffer, the ``sock_fprog`` and libc's ``prctl`` —
    so the child only makes two system calls and allocates nothing between fork and exec.
    """

    def __init__(self, program: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(program, len(program))
        self._prog = _SockFilterProg(len(program) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))
        libc = ctypes.CDLL(None, use_errno=True)
        self._prctl = libc.prctl
        self._prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong)
        self._prctl.restype = ctypes.c_int
        self._prog_address = ctypes.addressof(self._prog)

    def __call__(self) -> None:
        if self._prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if self._prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self._prog_address, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
