"""A remote executor: ``python -m worker.executor --environment prod --channel rw``.

A process of its own, deployed where the environment's infrastructure credential lives and nowhere else:
it polls only ``exec.<environment>.<channel>``, holds one credential family (``BAMBOO_EXECUTOR_CREDENTIAL``,
whose values are in its own environment), the keys it trusts to sign envelopes (the agent's and the people's
who run commands themselves), and runs nothing but the command tools the command-tools file declares. It needs
Temporal and the store (nonces, grants, the approver registry, the audit log) and reads the administrators'
keys the deployment pins (``BAMBOO_ADMIN_KEYS_FILE``) itself: a grant or an approver's registration in the
store counts only when one of those keys signed it. It needs no model endpoint and no sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Mapping

from temporalio.worker import Worker

from activities.executor import ExecutorActivities
from bamboo.approvals.admin import PinnedAdmins
from bamboo.approvals.registry import ApproverRegistry, TrustRootSource
from bamboo.executors.service import CommandExecutor
from bamboo.executors.config import ExecutorConfig, ExecutorConfigError, ExecutorSettings, load_executor_config
from bamboo.executors.contract import ExecutorAddressError, executor_queue
from bamboo.app import Process, open_app
from bamboo.contract import HEARTBEAT_SENT_EVERY
from bamboo.settings import Settings, get_settings
from bamboo.store.executor_state import ExecutorState
from bamboo.temporal_client import connect
from policy.write_gates import gated

log = logging.getLogger("bamboo.executor")


async def run_executor(settings: Settings, config: ExecutorConfig, *, stop: asyncio.Event,
                       admins: TrustRootSource | None = None, source: Mapping[str, str] | None = None,
                       ready: asyncio.Event | None = None) -> None:
    """Poll the executor's one queue until ``stop`` is set. ``admins`` defaults to the keys pinned in the
    executor's own settings."""
    if not settings.database_url:
        raise ExecutorConfigError("an executor needs the store: set BAMBOO_DATABASE_URL")
    queue = executor_queue(config.environment, config.channel)
    opened = await open_app(settings, Process.EXECUTOR)
    pool = opened.store.pool
    try:
        audit = opened.store.audit
        admins = admins or PinnedAdmins.of(settings)
        pinned = len(admins.root().admins)
        executor = CommandExecutor(config, ExecutorState(pool), audit, ApproverRegistry(pool, audit, admins), admins,
                                   source=source)
        client = await connect(settings, service=f"bamboo-executor-{config.environment}-{config.channel}")
        async with Worker(client, task_queue=queue, activities=[ExecutorActivities(executor).run_command],
                          max_concurrent_activities=4, max_heartbeat_throttle_interval=HEARTBEAT_SENT_EVERY):
            log.info("executor polling %s (credential %s, %d verification key(s), %d pinned administrator(s))", queue,
                     config.held_credential or "none", len(config.verification_keys), pinned)
            if pinned == 0 and gated(config.environment, config.gated_environments):
                log.warning("no administrator is pinned (BAMBOO_ADMIN_KEYS_FILE): no grant and no approver counts, "
                            "so every write in %s is refused", config.environment)
            if ready is not None:
                ready.set()
            await stop.wait()
    finally:
        await opened.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m worker.executor", description=__doc__.splitlines()[0])
    parser.add_argument("--environment", required=True, help="e.g. staging or prod")
    parser.add_argument("--channel", required=True, choices=["ro", "rw"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings()
    exec_settings = ExecutorSettings()
    try:
        executor_queue(args.environment, args.channel)
        if settings.command_tools_file is None:
            raise ExecutorConfigError("set BAMBOO_COMMAND_TOOLS_FILE to the command-tools file this executor runs")
        config = load_executor_config(args.environment, args.channel, tools_file=settings.command_tools_file,
                                      settings=exec_settings, approval_rules=settings.approval_rules())
        admins = PinnedAdmins.of(settings)
        admins.root()  # a malformed admin keys file stops the executor here, in one line
    except (ExecutorConfigError, ExecutorAddressError, ValueError) as exc:
        sys.exit(f"error: {str(exc).splitlines()[0]}")
    stop = asyncio.Event()

    async def _run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_executor(settings, config, stop=stop, admins=admins)

    asyncio.run(_run())


if __name__ == "__main__":
    main()
