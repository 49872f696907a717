"""Shared CLI plumbing: one console, one way to run async code, errors that say what to do."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def fail(message: str, code: int = 1) -> None:
    err_console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)
