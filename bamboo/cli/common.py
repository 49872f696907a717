"""Shared CLI plumbing: one console, one way to run async code, errors that say what to do.

Every command runs inside `BambooGroup`, which turns an exception that escapes a command into one
line on stderr (what was wrong, what to do) and exit status 1. Known failures — Temporal refusing a
request or not answering, the knowledge store unreachable or refusing a statement, input that does
not validate, the project's own errors — get a message written for them; anything else still gets
one line, naming the exception. The traceback is for developers: `bamboo --debug <command>` (or
BAMBOO_DEBUG=1) lets it through.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Coroutine, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from bamboo.frontends.inert_text import inert_terminal

# emoji=False: rich turns ":white_check_mark:" into ✅ anywhere in a printed string, and model-written text (an
# override reason, a summary) is printed here; inert_markup escapes markup but not emoji codes. The CLI writes
# no emoji code of its own.
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

_debug = os.environ.get("BAMBOO_DEBUG", "").lower() in ("1", "true", "yes")
MAX_MESSAGE = 600


def set_debug(on: bool) -> None:
    global _debug
    _debug = _debug or on


def debug_enabled() -> bool:
    return _debug


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr (a multi-line message, such as a database's, is joined) and exit `code`."""
    _print_error(one_line(message))
    raise typer.Exit(code)


def verdict(as_json: bool, accepted: bool, body: dict[str, Any], said: str) -> None:
    """A verdict (grant, revoke, register) for a person or a script: with ``as_json`` one JSON object on stdout
    (``accepted`` and ``body``; a refusal adds ``refusal``, the one-line reason), else ``said`` (accepted, on
    stdout) or the one-line error (refused, on stderr). A refusal exits 1 either way."""
    if as_json:
        print(json.dumps({"accepted": accepted, **body} | ({} if accepted else {"refusal": one_line(said)}),
                         default=str))
        if not accepted:
            raise typer.Exit(1)
        return
    if not accepted:
        fail(said)
    print(said)


def _print_error(message: str) -> None:
    # Text, not markup: an exception's message may contain brackets rich would take for tags, and it may quote
    # what a session, a tool or the model said, so it is printed inert.
    err_console.print(Text.assemble(("error:", "bold red"), " ", inert_terminal(message, one_line=True)),
                      highlight=False, soft_wrap=True)


def one_line(text: str, limit: int | None = None) -> str:
    line = " ".join(part.strip() for part in str(text).strip().splitlines() if part.strip())
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


def explain(exc: BaseException) -> str:
    """One line for any exception: written for the known kinds, generic for the rest."""
    for kind, describe in _KNOWN:
        if isinstance(exc, kind()):
            return one_line(describe(exc), MAX_MESSAGE)
    if type(exc).__module__.split(".")[0] == "bamboo" and str(exc):
        return one_line(str(exc), MAX_MESSAGE)  # the project's own errors already say what to do
    return one_line(f"unexpected {type(exc).__name__}: {str(exc)[:200] or 'no message'}. This is a bug or an "
                    "unhandled condition; rerun with `bamboo --debug ...` for the traceback and report it")


def _rpc_error(exc: Any) -> str:
    from temporalio.service import RPCStatusCode

    status = exc.status
    if status == RPCStatusCode.NOT_FOUND:
        return f"Temporal has no such workflow or namespace ({exc.message}); check the id you gave"
    if status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
        return (f"Temporal did not answer ({status.name}: {exc.message}); start the embedded stack with "
                "`bamboo dev up`, or check BAMBOO_TEMPORAL_ADDRESS")
    if status == RPCStatusCode.INVALID_ARGUMENT:
        return f"Temporal refused the request as invalid ({exc.message}); check the arguments"
    name = status.name if status is not None else "error"
    return f"Temporal refused the request ({name}: {exc.message}); check the id and the arguments"


def _workflow_failed(exc: Any) -> str:
    cause = exc.cause
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause
    why = getattr(cause, "message", None) or str(cause or exc)
    return f"the workflow failed: {why}; open it in Temporal Web for its history"


def _store_unreachable(exc: BaseException) -> str:
    return (f"cannot reach the knowledge store ({exc}); start the embedded stack with `bamboo dev up`, "
            "or check BAMBOO_DATABASE_URL")


def _store_refused(exc: BaseException) -> str:
    return f"the knowledge store refused the request ({type(exc).__name__}: {exc}); rerun with --debug for details"


def _validation(exc: Any) -> str:
    if exc.title == "Settings":  # name the environment variable the operator set, not the field
        problems = "; ".join(
            f"{'BAMBOO_' + str(e['loc'][0]).upper() if e['loc'] else 'the BAMBOO_ settings'}: "
            f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors()[:3])
        return f"invalid configuration: {problems}; fix the environment (or .env) and run again"
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg'].removeprefix('Value error, ')}"
        for e in exc.errors()[:3])
    return f"invalid {exc.title}: {problems}; fix the input and run again"


def _os_error(exc: Any) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}; check the path and its permissions"


def _types(*names: str):
    """Resolve exception classes lazily: importing temporalio or psycopg costs a `--help` nothing."""
    def resolve() -> tuple[type, ...]:
        import importlib

        found = []
        for name in names:
            module, _, attr = name.rpartition(".")
            try:
                found.append(getattr(importlib.import_module(module), attr))
            except (ImportError, AttributeError):
                continue
        return tuple(found)
    return resolve


# First match wins: narrower kinds before the families that contain them.
_KNOWN = [
    (_types("temporalio.client.WorkflowFailureError"), _workflow_failed),
    (_types("temporalio.service.RPCError"), _rpc_error),
    (_types("psycopg.OperationalError"), _store_unreachable),
    (_types("psycopg.Error"), _store_refused),
    (_types("pydantic.ValidationError"), _validation),
    (_types("builtins.ConnectionError", "builtins.TimeoutError"), lambda e: str(e) or type(e).__name__),
    (_types("builtins.OSError"), _os_error),
]


def _framework(exc: BaseException) -> bool:
    """typer's own exceptions (exit, abort, usage errors, from the click it bundles): they already
    print what they mean and set the exit status."""
    return type(exc).__module__.split(".")[0] in ("typer", "click")


class BambooGroup(TyperGroup):
    """The root command group: every sub-command's escaping exception becomes one line."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:  # noqa: BLE001 — this is the one place that turns them into messages
            if debug_enabled() or _framework(exc):
                raise
            _print_error(explain(exc))
            raise typer.Exit(1) from None
