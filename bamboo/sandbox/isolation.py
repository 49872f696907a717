"""How a sandbox child is launched: the bwrap command line, or the degraded fallback.

With bubblewrap the child gets new user, network, pid, ipc, uts and mount namespaces; its root is a
tmpfs holding only read-only binds of the system libraries and the interpreter (no shell, no
coreutils, no /etc, no project tree, no ``_ctypes``), fresh /proc, /dev and /tmp, a tmpfs work dir,
an empty environment, and it dies with its parent. When the worker runs as root, bwrap itself is
started as the unprivileged sandbox uid, so even files the namespace maps into view stay unreadable.

Without bubblewrap the child still gets a clean environment, a private work dir, a different uid
(when the worker is root), its own session and rlimits; it shares the network, the filesystem view
and the pid space with the host. That is weaker and is reported as ``isolation="degraded"`` with
explanatory warnings, never silently.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bamboo.sandbox.models import Isolation, SandboxLimits

log = logging.getLogger(__name__)

NOBODY = 65534
SANDBOX_WORKDIR = "/sandbox"
SANDBOX_RUNNER = "/opt/sandbox/child_runner.py"
SANDBOX_PYTHON = "/usr/bin/python3"
CHILD_PATH_ENV = "/usr/bin"

DEGRADED_WARNINGS = (
    "DEGRADED sandbox isolation: bubblewrap (bwrap) is not available or was not chosen, so the script runs WITHOUT namespaces",
    "degraded sandbox: the script shares the host network, filesystem view and process list",
    "degraded sandbox: only rlimits, a clean environment, a private work dir and a separate uid contain it",
)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to exec one child; built once per runner, used for every spawn."""

    isolation: Isolation
    argv_prefix: tuple[str, ...]
    runner_path: str
    env: dict[str, str]
    uid: int | None
    gid: int | None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def argv(self, bridge_fd: int, limits: SandboxLimits) -> list[str]:
        argv = list(self.argv_prefix)
        if self.isolation == "degraded":
            argv = [self.argv_prefix[0], "-I", "-S", "-B"]
        return argv + [self.runner_path, str(bridge_fd), json.dumps(limits.child_view(), separators=(",", ":"))]


def find_bwrap() -> str | None:
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")


def _ctypes_modules(python_lib: Path) -> list[str]:
    dynload = python_lib / "lib-dynload"
    if not dynload.is_dir():
        return []
    return sorted(str(p) for p in dynload.glob("_ctypes*.so"))


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
    sandbox_uid: int = NOBODY,
    sandbox_gid: int = NOBODY,
) -> LaunchPlan:
    """Choose bwrap when present (or demanded), otherwise the degraded plan with its warnings."""
    running_as_root = os.geteuid() == 0
    uid = sandbox_uid if running_as_root else None
    gid = sandbox_gid if running_as_root else None
    bwrap = find_bwrap() if mode in ("auto", "bwrap") else None
    if mode == "bwrap" and bwrap is None:
        raise RuntimeError(
            "sandbox isolation 'bwrap' was requested but bwrap is not installed; "
            "install it (apt-get install -y bubblewrap) or choose isolation 'auto'"
        )
    warnings: list[str] = []
    if bwrap is not None:
        plan = LaunchPlan(
            isolation="bwrap",
            argv_prefix=tuple(_bwrap_argv(bwrap, python, runner_path, limits, sandbox_uid, sandbox_gid)),
            runner_path=SANDBOX_RUNNER,
            env={},
            uid=uid,
            gid=gid,
        )
        failure = probe(plan)
        if failure is None:
            return plan
        if mode == "bwrap":
            raise RuntimeError(f"sandbox isolation 'bwrap' was requested but bwrap cannot start a sandbox here: {failure}")
        warnings.append(f"bwrap is installed but cannot create a sandbox on this host: {failure}")
    warnings += list(DEGRADED_WARNINGS)
    if not running_as_root:
        warnings.append(
            "degraded sandbox: the worker is not root, so the script runs as the worker's own uid and can "
            "read the worker's files and /proc entries"
        )
    for line in warnings:
        log.warning("%s", line)
    return LaunchPlan(
        isolation="degraded",
        argv_prefix=(python,),
        runner_path=runner_path,
        env={"LANG": "C.UTF-8", "PATH": CHILD_PATH_ENV},
        uid=uid,
        gid=gid,
        warnings=tuple(warnings),
    )


_probe_cache: dict[tuple[object, ...], str | None] = {}


def probe(plan: LaunchPlan) -> str | None:
    """Start the planned sandbox once with a no-op script; None when it works, else why not.

    Catches hosts where bwrap exists but namespaces are forbidden (nested containers, seccomp
    policies) before the first real run does. Remembered per command line for the process lifetime.
    """
    key = (plan.argv_prefix, plan.uid, plan.gid)
    if key not in _probe_cache:
        _probe_cache[key] = _probe_once(plan)
    return _probe_cache[key]


def _probe_once(plan: LaunchPlan) -> str | None:
    extra: dict[str, object] = {}
    if plan.uid is not None:
        extra.update(user=plan.uid, group=plan.gid, extra_groups=[])
    try:
        done = subprocess.run(
            [*plan.argv_prefix, "-c", "pass"], env=plan.env, stdin=subprocess.DEVNULL, capture_output=True,
            timeout=30, cwd="/", **extra,  # type: ignore[arg-type]
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.decode("utf-8", "replace").strip()[:500] or f"exit code {done.returncode}"
    return None


def _bwrap_argv(
    bwrap: str, python: str, runner_path: str, limits: SandboxLimits, uid: int, gid: int
) -> list[str]:
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
    if Path("/usr/lib64").is_dir():
        argv += ["--ro-bind", "/usr/lib64", "/usr/lib64", "--symlink", "usr/lib64", "/lib64"]
    argv += ["--symlink", "usr/lib", "/lib"]
    if not str(python_lib).startswith("/usr/lib/"):
        argv += ["--ro-bind", str(python_lib), str(python_lib)]
    for module in _ctypes_modules(python_lib):
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
        "--uid", str(uid),
        "--gid", str(gid),
        "--hostname", "sandbox",
        "--clearenv",
        "--setenv", "HOME", SANDBOX_WORKDIR,
        "--setenv", "TMPDIR", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PATH", CHILD_PATH_ENV,
        SANDBOX_PYTHON, "-I", "-S", "-B",
    ]
    return argv
