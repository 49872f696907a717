"""ExecCommand: one command tool call routed to the executor of its (environment, channel).

The smallest workflow that can carry a signed envelope to ``exec.<environment>.<channel>``: it holds no
credential and judges nothing; the executor on that queue verifies and gates everything. A refusal comes
back as the activity's non-retryable ``ApplicationError`` and fails this workflow with that type, so a
caller (the CLI, or an investigation's command-tool call) sees which check refused.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from bamboo.executors import contract
    from bamboo.executors.contract import ExecCall

__all__ = ["ExecCall", "ExecCommand"]


@workflow.defn(name=contract.EXEC_WORKFLOW)
class ExecCommand:
    @workflow.run
    async def run(self, call: ExecCall) -> contract.ExecResult:
        return await workflow.execute_activity(contract.run_command, call.request,
                                               **contract.exec_options(call.environment, call.channel))
