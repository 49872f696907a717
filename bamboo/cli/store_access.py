"""Open the knowledge store for one CLI command, the way every process opens it (``bamboo.app``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bamboo.app import Process, opened_app
from bamboo.settings import Settings
from bamboo.store import Store


@asynccontextmanager
async def opened_store(settings: Settings) -> AsyncIterator[Store]:
    async with opened_app(settings, Process.CLI) as app:
        yield app.store
