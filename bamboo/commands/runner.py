"""Run one matched command: argv only, no shell, no stdin, a deadline and an output cap, scrubbed output.

The argv comes from ``policy.commands.evaluate`` and runs exactly as matched. Right before the exec the
root-bounded paths are resolved once more on the file system, so a symlink planted after the policy decision
still cannot carry a path out of the root. The child gets its own process group so a deadline or the output
cap kills everything it started. What it printed is scrubbed before it is returned: first every credential
value the child was given, literally and percent-encoded (short or low-entropy values have no recognisable
shape), then the project's token-pattern and high-entropy scrubber.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, quote_plus

from pydantic import BaseModel, ConfigDict, Field

from bamboo.commands.credentials import HOME_PREFIX, credential_values
from bamboo.sandbox.output import CappedStream
from policy.command_values import within
from policy.commands import CommandDenied, CommandMatch
from policy.scrub import scrub_text

CREDENTIAL_REDACTION = "[REDACTED:credential]"
# util-linux's setpriv arms the parent-death signal (prctl PR_SET_PDEATHSIG) and execs the command: the child is
# killed when the process that started it dies. Without it a SIGKILLed executor left its command running in its
# own session, unwatched, its outcome never recorded. Where setpriv is missing the command runs without it.
SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")
MIN_LITERAL_SECRET = 4
_HEX_ESCAPE = re.compile(r"%[0-9A-F]{2}")
EXIT_GRACE_S = 2.0


class CommandOutcome(BaseModel):
    """What a command did, safe to show: its output is already scrubbed and capped."""

    model_config = ConfigDict(frozen=True)

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    duration_s: float
    timed_out: bool = False
    redactions: int = Field(default=0, description="how many secrets were scrubbed from stdout and stderr")


def confine_paths(match: CommandMatch) -> None:
    """Refuse when a root-bounded path now resolves (through a symlink) outside the tool's root."""
    if not match.paths:
        return
    if match.root is None:
        raise CommandDenied(f"rule {match.rule} has path arguments but tool {match.tool} declares no root")
    root = os.path.realpath(match.root)
    if root != match.root:
        raise CommandDenied(f"the root {match.root} now resolves to {root}; it was replaced after the tools file "
                            "loaded, reload it")
    for path in match.paths:
        real = os.path.realpath(path)
        if not within(real, root):
            raise CommandDenied(f"path {path} resolves through a symlink to {real}, outside the root {match.root}")


def literal_forms(value: str) -> set[str]:
    """A credential value as a child may print it: literally, and percent-encoded as it appears in a URL
    (curl's ``%{url_effective}`` printed a secret as ``TOKEN%3dvalue``, which no token pattern recognised): every
    byte but the unreserved ones encoded or '/' kept, '+' for a space, in upper- and lower-case hex."""
    forms = {value}
    for encoded in (quote(value, safe=""), quote(value), quote_plus(value, safe="")):
        forms |= {encoded, _HEX_ESCAPE.sub(lambda m: m.group(0).lower(), encoded)}
    return forms


def scrub_output(text: str, secrets: list[str]) -> tuple[str, int]:
    """Credential values replaced literally, raw and percent-encoded (longest first), then the project's
    scrubber over the rest."""
    hits = 0
    secrets = sorted({form for s in secrets for form in literal_forms(s)})
    for value in sorted({s for s in secrets if len(s) >= MIN_LITERAL_SECRET}, key=len, reverse=True):
        count = text.count(value)
        if count:
            hits += count
            text = text.replace(value, CREDENTIAL_REDACTION)
    for value in secrets:  # the cap may have cut a credential: its head at the very end is still secret
        for size in range(len(value) - 1, MIN_LITERAL_SECRET - 1, -1):
            if text.endswith(value[:size]):
                text, hits = text[:-size] + CREDENTIAL_REDACTION, hits + 1
                break
    result = scrub_text(text)
    return result.text, hits + len(result.findings)


def _dies_with_its_parent(argv: list[str]) -> list[str]:
    return [SETPRIV, "--pdeathsig", "KILL", "--", *argv] if SETPRIV else list(argv)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_command(match: CommandMatch, env: dict[str, str], *, timeout_s: float,
                      output_limit: int) -> CommandOutcome:
    """Execute ``match.argv`` with ``env`` (from ``clean_environment``); never through a shell.

    ``output_limit`` caps each of stdout and stderr in bytes; a child that goes past it is killed and the
    outcome says ``truncated``. ``timeout_s`` kills the child's whole process group.
    """
    home = env.get("HOME")
    try:
        proc, stdout, stderr, timed_out, duration = await _execute(match, env, home, timeout_s, output_limit)
    finally:
        if home and Path(home).name.startswith(HOME_PREFIX) and Path(home).parent == Path(tempfile.gettempdir()):
            shutil.rmtree(home, ignore_errors=True)
    secrets = credential_values(env, match)
    out_text, out_hits = scrub_output(stdout.text(), secrets)
    err_text, err_hits = scrub_output(stderr.text(), secrets)
    return CommandOutcome(
        exit_code=proc.returncode if proc.returncode is not None else -1, stdout=out_text, stderr=err_text,
        truncated=stdout.overflowed or stderr.overflowed, duration_s=duration,
        timed_out=timed_out, redactions=out_hits + err_hits,
    )


async def _execute(match: CommandMatch, env: dict[str, str], home: str | None, timeout_s: float,
                   output_limit: int) -> tuple[asyncio.subprocess.Process, CappedStream, CappedStream, bool, float]:
    if not match.argv or match.argv[0] != match.executable or not os.path.isabs(match.executable):
        raise CommandDenied(f"argv[0] must be the tool's absolute executable {match.executable}")
    if not os.access(match.executable, os.X_OK):
        raise CommandDenied(f"executable {match.executable} is missing or not executable; fix the tools file")
    confine_paths(match)
    started = time.monotonic()
    timed_out = False
    try:
        proc = await asyncio.create_subprocess_exec(
            *_dies_with_its_parent(match.argv), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=match.cwd or home or tempfile.gettempdir(),
            start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        raise CommandDenied(f"could not start {match.executable}: {exc.strerror or exc}") from None
    stdout = CappedStream(output_limit, lambda: _kill_group(proc))
    stderr = CappedStream(output_limit, lambda: _kill_group(proc))
    try:
        drains = asyncio.gather(stdout.drain(proc.stdout), stderr.drain(proc.stderr))
        try:
            await asyncio.wait_for(proc.wait(), timeout=timeout_s)
        except asyncio.TimeoutError:
            timed_out = True
            _kill_group(proc)
            await proc.wait()
        _kill_group(proc)  # anything the child left behind in its group would hold the pipes open
        try:
            await asyncio.wait_for(drains, timeout=EXIT_GRACE_S)
        except asyncio.TimeoutError:
            pass
    except BaseException:
        _kill_group(proc)
        raise
    return proc, stdout, stderr, timed_out, time.monotonic() - started
