"""How a sandbox child is launched: the bwrap command line, or the degraded plan an operator opted into.

With bubblewrap the child gets new user, network, pid, ipc, uts and mount namespaces; its root is a
tmpfs holding only read-only binds of the system libraries and the interpreter (no shell, no
coreutils, no /etc, no project tree, no ``_ctypes`` or ``_cffi_backend``, no third-party Python
packages), fresh /proc, /dev and /tmp, a tmpfs work dir, an empty environment, the seccomp filter of
``bamboo.sandbox.seccomp``, and it dies with its parent. When the worker runs as root, bwrap itself is
started as a uid leased for the run, so even files the namespace maps into view stay unreadable.

Isolation fails closed: when bwrap is missing or its probe cannot start a sandbox, there is no sandbox
(``SandboxUnavailable``) unless the operator chose ``degraded`` explicitly (``BAMBOO_SANDBOX_ISOLATION=
degraded``). Degraded is not a boundary — the child shares the network namespace, the filesystem view
and the pid space with the host — so it needs a root worker (each run gets a uid of its own and
everything that uid runs is killed at the end), it still gets the seccomp filter, rlimits, a clean
environment and a private work dir, and the executor refuses unattended runs and state-changing tools
in it. Every result says ``isolation="degraded"`` with these warnings.

What degraded mode additionally refuses or warns of, at start (``plan_launch``), because there the run shares the
host's files and network:

* the seccomp filter off (``BAMBOO_SANDBOX_SECCOMP=false``): it is degraded mode's only barrier to the network (no
  network namespace), so a run without it reached Temporal, Postgres and the LLM endpoint directly. Refused.
* a worker secret file readable by group or others (``worker_secret_files``: the ``.env`` settings file the worker
  loaded, which holds the LLM key, the database URL and the PanDA token, the files the settings name as keys, the
  MCP servers' file, and the private keys in the keys directory, the command agent's among them):
  a run walked the filesystem and read it. Refused, with the ``chmod 600`` to run.
* ``fs.protected_regular``, ``fs.protected_fifos`` or ``fs.protected_symlinks`` below 1. Every run's files are
  created under umask 077 (``runner``), so what a run writes in /tmp is its own; but with these at 0 a run can
  plant a file (0666), FIFO or symlink at a name another live run later opens in /tmp, and so read what that run
  writes there or decide what it reads. Warned, loudly (logged and in every result's warnings), not refused.
  Decision and risk: the hosts this suite runs on have all three at 0 and these sysctls are not per namespace,
  so refusing would stop degraded mode, and its whole test suite, on them; the risk accepted is that leak
  between two concurrent runs through a fixed /tmp name (each run's HOME and TMPDIR are private, so only code
  that names a shared path on purpose is exposed). Set the three to 1 (``sysctl -w fs.protected_regular=1
  fs.protected_fifos=1 fs.protected_symlinks=1``) on a degraded host, or install bubblewrap.
"""

from __future__ import annotations

import functools
import glob
import json
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable, Sequence
from typing import Any

from bamboo.sandbox.errors import SandboxUnavailable
from bamboo.sandbox.contract import Isolation
from bamboo.sandbox.models import SandboxLimits
from bamboo.sandbox.seccomp import ChildInstaller, SeccompUnavailable, filter_program, program_fd

log = logging.getLogger(__name__)

NOBODY = 65534
SANDBOX_WORKDIR = "/sandbox"
SANDBOX_RUNNER = "/opt/sandbox/child_runner.py"
SANDBOX_PYTHON = "/usr/bin/python3"
CHILD_PATH_ENV = "/usr/bin"
OPT_IN = "set BAMBOO_SANDBOX_ISOLATION=degraded to accept a degraded sandbox that refuses unattended runs and state-changing tools"
FFI_MODULES = ("_ctypes*.so", "_cffi_backend*.so")

DEGRADED_WARNINGS = (
    "DEGRADED sandbox isolation (chosen by the operator): the script runs WITHOUT namespaces",
    "degraded sandbox: the script shares the host's filesystem view, process list and network namespace; only its "
    "own uid, rlimits, the seccomp filter (no socket of any kind, no ptrace), a clean environment and a private "
    "work dir contain it",
    "degraded sandbox: unattended (automatic) runs and state-changing tools are refused",
)
# The kernel's guards against planting a file, FIFO or symlink in a sticky world-writable directory for another
# uid to open; 1 or more is "on" (2 for regular files and FIFOs also covers group-writable sticky directories).
PROTECTED_SYSCTLS = ("protected_regular", "protected_fifos", "protected_symlinks")
SYSCTL_DIR = "/proc/sys/fs"


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to exec one child; built once per runner, used for every spawn."""

    isolation: Isolation
    bwrap_options: tuple[str, ...]
    interpreter: tuple[str, ...]
    runner_path: str
    env: dict[str, str]
    seccomp_program: bytes | None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def argv(self, bridge_fd: int, limits: SandboxLimits, seccomp_fd: int | None = None) -> list[str]:
        argv = list(self.bwrap_options)
        if seccomp_fd is not None and self.isolation == "bwrap":
            argv += ["--seccomp", str(seccomp_fd)]
        return argv + [*self.interpreter, self.runner_path, str(bridge_fd),
                       json.dumps(limits.child_view(), separators=(",", ":"))]

    def child_installer(self) -> ChildInstaller | None:
        """Degraded mode has no bwrap to install the filter: the forked child does it before exec."""
        if self.isolation == "degraded" and self.seccomp_program is not None:
            return ChildInstaller(self.seccomp_program)
        return None


def find_bwrap() -> str | None:
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")


@functools.lru_cache(maxsize=4)
def ffi_modules(roots: tuple[str, ...]) -> tuple[str, ...]:
    """Every ``_ctypes``/``_cffi_backend`` extension under the trees bound into the sandbox: with either, a
    script calls arbitrary C functions. Found once per process (a walk of /usr/lib takes ~0.2 s warm).

    Hiding them is not the boundary: a script can write an extension of its own to /tmp or its work dir (both
    writable and executable; bwrap cannot mount a tmpfs noexec) and load it, so native code runs. What holds
    native code is what holds Python: the namespaces, the leased uid and the seccomp filter."""
    found: set[str] = set()
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
            for name in files:
                if any(Path(name).match(pattern) for pattern in FFI_MODULES):
                    found.add(os.path.join(folder, name))
    return tuple(sorted(found))


def foreign_python_dirs(python_lib: Path) -> list[str]:
    """Python package trees in /usr/lib other than the interpreter's own stdlib (dist-packages, other
    versions): ``-I -S`` never puts them on sys.path, and a script must not add them back."""
    own = os.path.realpath(python_lib)
    return sorted(d for d in glob.glob("/usr/lib/python3*") if os.path.isdir(d) and os.path.realpath(d) != own)


def _python_lib_dir(python: str) -> Path:
    real = Path(os.path.realpath(python))
    version = real.name.removeprefix("python")
    return real.parent.parent / "lib" / f"python{version or '3'}"


def plan_launch(
    *,
    mode: str,
    python: str,
    runner_path: str,
    limits: SandboxLimits,
    empty_dir: str,
    seccomp: bool = True,
    probe_uid: int | None = None,
    secret_files: Sequence[str | Path] = (),
) -> LaunchPlan:
    """bwrap when it can start a sandbox here; degraded only when the operator asked for it; else unavailable.

    ``secret_files`` are the worker's files a degraded run must not read (``worker_secret_files``); bwrap never
    shows them to a run."""
    running_as_root = os.geteuid() == 0
    if mode == "degraded":
        if not running_as_root:
            raise SandboxUnavailable(
                "degraded sandbox isolation needs a root worker, so that every run gets a uid of its own; "
                "install bubblewrap (apt-get install -y bubblewrap) or run the sandbox worker as root")
        if not seccomp:
            raise SandboxUnavailable(
                "degraded sandbox isolation needs the seccomp filter, its only barrier between a run and the host's "
                "network: set BAMBOO_SANDBOX_SECCOMP=true, or install bubblewrap (apt-get install -y bubblewrap)")
        exposed = readable_by_others(secret_files)
        if exposed:
            raise SandboxUnavailable(
                f"the degraded sandbox shares the host's files with runs, and the worker's secrets in {', '.join(exposed)} "
                f"are readable by group or others: run chmod 600 {' '.join(exposed)} (or install bubblewrap)")
    program = _seccomp_program() if seccomp else None
    if mode == "degraded":
        warnings = list(DEGRADED_WARNINGS) + unprotected_tmp_warnings()
        for line in warnings:
            log.warning("%s", line)
        return LaunchPlan(
            isolation="degraded", bwrap_options=(), interpreter=(python, "-I", "-S", "-B"), runner_path=runner_path,
            env={"LANG": "C.UTF-8", "PATH": CHILD_PATH_ENV}, seccomp_program=program, warnings=tuple(warnings),
        )
    if mode not in ("auto", "bwrap"):
        raise SandboxUnavailable(f"unknown sandbox isolation {mode!r}; choose bwrap (the default) or degraded")
    bwrap = find_bwrap()
    if bwrap is None:
        raise SandboxUnavailable(
            "the sandbox needs bubblewrap, which is not installed: install it (apt-get install -y bubblewrap), "
            f"or {OPT_IN}")
    plan = LaunchPlan(
        isolation="bwrap",
        bwrap_options=tuple(_bwrap_argv(bwrap, python, runner_path, limits, empty_dir)),
        interpreter=(SANDBOX_PYTHON, "-I", "-S", "-B"),
        runner_path=SANDBOX_RUNNER,
        env={},
        seccomp_program=program,
        warnings=() if program else ("the sandbox's seccomp filter is OFF",),
    )
    failure = probe(plan, probe_uid if running_as_root else None)
    if failure is not None:
        raise SandboxUnavailable(f"bwrap is installed but cannot start a sandbox on this host ({failure}); "
                                 f"fix that, or {OPT_IN}")
    return plan


def readable_by_others(paths: Iterable[str | Path]) -> list[str]:
    """The files among ``paths`` that exist and that group or others may read (through symlinks, as an open would).

    Group counts too: a run has no supplementary groups today, but a file that only its group keeps from the runs
    is one ``usermod`` away from them."""
    found = []
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if mode & 0o044:
            found.append(str(path))
    return found


def worker_secret_files(settings: Any, *held: Path | None) -> tuple[Path, ...]:
    """The worker's own files that hold its secrets, as its ``settings`` (``bamboo.settings.Settings``) name them:
    the settings file (``.env``, read from the worker's working directory, holding the LLM key, the database URL
    and the PanDA token), the key files the settings point at (the audit signing key, the PanDA X.509 proxy), the
    MCP servers' file (its ``headers`` and ``env`` may hold tokens), and every private key in the keys directory
    (the command agent's signs the envelopes executors honour; a console's or a bot's may sit beside it).

    ``held``: secret files the worker holds that no setting names, which its wiring resolves (the sandbox does not
    read the store's configuration): the audit signing key the store signs with, ``audit-signing.key`` beside the
    checkpoint file when BAMBOO_AUDIT_SIGNING_KEY is unset, which a degraded run read at 0644 (review)."""
    env_files = type(settings).model_config.get("env_file")
    names = [env_files] if isinstance(env_files, (str, Path)) else list(env_files or ())
    found = [Path(name).expanduser().absolute() for name in names]
    named = [settings.audit_signing_key, settings.panda_x509_proxy, settings.mcp_servers_config, *held]
    found += [p.expanduser().absolute() for p in dict.fromkeys(named) if p is not None]
    keys = settings.resolved_keys_dir().absolute()
    try:
        found += sorted(keys.glob("*.pem"))
    except OSError:  # no keys directory: no key to protect
        pass
    return tuple(found)


def unprotected_tmp_warnings(sysctl_dir: str = SYSCTL_DIR) -> list[str]:
    """One warning naming every ``fs.protected_*`` sysctl below 1 (or unreadable), with the value to set; else none.

    A warning, not a refusal: the module's docstring records why, and the risk taken."""
    low = []
    for name in PROTECTED_SYSCTLS:
        try:
            with open(os.path.join(sysctl_dir, name), encoding="ascii") as fh:
                value = int(fh.read().strip())
        except (OSError, ValueError):
            value = -1
        if value < 1:
            low.append(f"fs.{name}={value if value >= 0 else '?'}")
    if not low:
        return []
    wanted = " ".join(f"{item.split('=')[0]}=1" for item in low)
    return [f"degraded sandbox: {', '.join(low)}: a run can plant a file, FIFO or symlink in /tmp that another live "
            f"run then opens, and read what it writes there; set sysctl -w {wanted}, or install bubblewrap"]


def _seccomp_program() -> bytes:
    try:
        return filter_program()
    except SeccompUnavailable as exc:
        raise SandboxUnavailable(str(exc)) from exc


_probe_cache: dict[tuple[object, ...], str | None] = {}
_PROBE_WITH_FILTER = (
    "import socket\n"
    "for family in (socket.AF_INET6, socket.AF_UNIX):\n"
    "    try:\n        socket.socket(family)\n    except OSError:\n        continue\n"
    "    raise SystemExit('the seccomp filter is not in force')\n"
)


def probe(plan: LaunchPlan, uid: int | None) -> str | None:
    """Start the planned sandbox once with a no-op script; None when it works, else why not.

    Catches hosts where bwrap exists but namespaces (or seccomp) are forbidden — nested containers,
    restrictive policies — before the first real run does. Remembered per command line for the process
    lifetime.
    """
    key = (plan.bwrap_options, plan.seccomp_program, uid)
    if key not in _probe_cache:
        _probe_cache[key] = _probe_once(plan, uid)
    return _probe_cache[key]


def _probe_once(plan: LaunchPlan, uid: int | None) -> str | None:
    extra: dict[str, Any] = {}
    if uid is not None:
        extra.update(user=uid, group=uid, extra_groups=[])
    fd = program_fd(plan.seccomp_program) if plan.seccomp_program is not None else None
    script = _PROBE_WITH_FILTER if fd is not None else "pass"
    argv = list(plan.bwrap_options) + (["--seccomp", str(fd)] if fd is not None else []) + [*plan.interpreter, "-c", script]
    try:
        done = subprocess.run(
            argv, env=plan.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, cwd="/",
            pass_fds=(fd,) if fd is not None else (), **extra,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        if fd is not None:
            os.close(fd)
    if done.returncode != 0:
        return done.stderr.decode("utf-8", "replace").strip()[:500] or f"exit code {done.returncode}"
    return None


def _bwrap_argv(bwrap: str, python: str, runner_path: str, limits: SandboxLimits, empty_dir: str) -> list[str]:
    python_lib = _python_lib_dir(python)
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--ro-bind", "/usr/lib", "/usr/lib",
    ]
    roots = ["/usr/lib"]
    if Path("/usr/lib64").is_dir():
        argv += ["--ro-bind", "/usr/lib64", "/usr/lib64", "--symlink", "usr/lib64", "/lib64"]
        roots.append("/usr/lib64")
    argv += ["--symlink", "usr/lib", "/lib"]
    if not str(python_lib).startswith("/usr/lib/"):
        argv += ["--ro-bind", str(python_lib), str(python_lib)]
        roots.append(str(python_lib))
    hidden = foreign_python_dirs(python_lib)
    for folder in hidden:
        argv += ["--ro-bind", empty_dir, folder]
    for module in ffi_modules(tuple(roots)):
        if not any(module.startswith(folder + "/") for folder in hidden):
            argv += ["--ro-bind", "/dev/null", module]
    argv += [
        "--ro-bind", os.path.realpath(python), SANDBOX_PYTHON,
        "--ro-bind", runner_path, SANDBOX_RUNNER,
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(limits.tmpfs_bytes), "--tmpfs", "/tmp",
        "--size", str(limits.tmpfs_bytes), "--tmpfs", SANDBOX_WORKDIR,
        "--remount-ro", "/",
        "--remount-ro", "/dev",  # bwrap's /dev is an unbounded tmpfs; the device nodes stay usable
        "--chdir", SANDBOX_WORKDIR,
        "--uid", str(NOBODY),
        "--gid", str(NOBODY),
        "--hostname", "sandbox",
        "--clearenv",
        "--setenv", "HOME", SANDBOX_WORKDIR,
        "--setenv", "TMPDIR", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PATH", CHILD_PATH_ENV,
    ]
    return argv
