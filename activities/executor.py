"""The remote executor's activity: hand the call to the executor and map its refusals to Temporal's.

A refusal is final (``non_retryable``): retrying a refused call changes nothing, and a retried write could
run twice. Its type names the check that refused, so a caller can tell a replay from a missing approval.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from bamboo.contract import implements
from bamboo.executors import contract
from bamboo.executors.service import CommandExecutor, ExecRefusal


class ExecutorActivities:
    def __init__(self, executor: CommandExecutor) -> None:
        self.executor = executor

    @implements(contract.run_command)
    async def run_command(self, request: contract.ExecRequest) -> contract.ExecResult:
        try:
            return await self.executor.run(request)
        except ExecRefusal as refused:
            raise ApplicationError(refused.message, type=refused.type, non_retryable=True) from None
