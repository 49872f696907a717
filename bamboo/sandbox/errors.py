"""Why a sandbox run could not happen at all (as opposed to a script that ran and failed)."""

from __future__ import annotations


class SandboxUnavailable(RuntimeError):
    """No sandbox can be started here (missing interpreter, bwrap or libseccomp failure); the message says what to fix."""


class SandboxRefused(RuntimeError):
    """The sandbox works, but not strongly enough for this run (degraded isolation); never worth a retry."""
