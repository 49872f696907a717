"""What every Bamboo process opens, built one way from settings: the embedder and the store sized for it.

The worker, the CLI, the console, the Mattermost bot and a command executor all need the knowledge store, and
the store's vector columns are as wide as the configured embedder's vectors, so "open a store" always means
"build the embedder, then open the store it fits, at the location the settings resolve (embedded or
configured), with audit checkpoints where they are configured". What differs between processes is one
``Process`` value: its pool size, and whether it is the worker (the only process that creates the audit
signing key on first use and waits out a database outage instead of failing fast).

The worker's composition root (``worker/``) adds what only activities need (the model client, the
extraction strategy, the sandbox, tools) on top of this; nothing here wires activities.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum

from bamboo.approvals.admin import PinnedAdmins
from bamboo.approvals.registry import ApproverRegistry, TrustRootSource
from bamboo.embeddings.base import Embedder
from bamboo.embeddings.factory import build_embedder
from bamboo.settings import Settings
from bamboo.store import Store, open_configured_store


class Process(StrEnum):
    """Which process is opening the store: it sets the pool size and the worker-only behaviour."""

    WORKER = "worker"
    CLI = "cli"
    CONSOLE = "console"
    BOT = "bot"
    EXECUTOR = "executor"


# Connections each process holds at most: the worker runs many activities at once; a front end serves a few
# requests; a CLI command makes one or two queries.
POOL_SIZE: dict[Process, int] = {Process.WORKER: 10, Process.CLI: 2, Process.CONSOLE: 4, Process.BOT: 2,
                                 Process.EXECUTOR: 4}


@dataclass
class App:
    """The settings, the embedder and the store one process opened, and what is built from them."""

    settings: Settings
    process: Process
    embedder: Embedder
    store: Store

    def registry(self, admins: TrustRootSource | None = None) -> ApproverRegistry:
        """Who may ask and approve, folded from the signed statements in this store by the pinned administrators
        (the deployment's own file unless ``admins`` is given, e.g. a test's)."""
        return ApproverRegistry(self.store.pool, self.store.audit, admins or PinnedAdmins.of(self.settings))

    async def close(self) -> None:
        await self.store.close()
        close_embedder = getattr(self.embedder, "aclose", None)
        if close_embedder is not None:  # the local ONNX model holds no connection
            await close_embedder()


async def open_app(settings: Settings, process: Process, *, pool_size: int | None = None,
                   embedder: Embedder | None = None) -> App:
    """Build the embedder (unless given) and open the store it fits; the caller closes the result."""
    embedder = embedder or build_embedder(settings)
    store = await open_configured_store(settings, embedder.dim, embedder.model_id,
                                        max_size=pool_size or POOL_SIZE[process],
                                        for_worker=process is Process.WORKER)
    return App(settings=settings, process=process, embedder=embedder, store=store)


@asynccontextmanager
async def opened_app(settings: Settings, process: Process, *, pool_size: int | None = None) -> AsyncIterator[App]:
    """``open_app`` for the length of a block."""
    app = await open_app(settings, process, pool_size=pool_size)
    try:
        yield app
    finally:
        await app.close()
