"""Command tools for generated code: a tool caller the sandbox bridge can dispatch to, backed by executors.

Each declared command tool that has a read rule for the environment becomes one read-only tool taking
``argv``; a call evaluates the argv with the command policy, signs a decision envelope with the worker's
agent key and runs it on ``exec.<environment>.ro``. Only reads are offered: a write needs a signed operator
approval of that exact command and a capability grant, which approving a code block does not give, so no
write is reachable from generated code through this caller (the ``ro`` executor has no write rule and no
write credential either).

The bridge does not tell a caller which phase the run is in, so every envelope claims ``automatic``: the
most restrictive phase, in which reads are allowed and writes never run.
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.client import Client

from bamboo.approvals.keys import LocalKey
from bamboo.contract import Queue
from bamboo.executors import signer
from bamboo.executors.client import ExecRefused, execute
from bamboo.tools.model import ToolOrigin, ToolResult, ToolSpec
from policy.commands import CommandDenied, CommandPolicy

MAX_ARGV = 256


def _schema() -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["argv"],
            "properties": {"argv": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_ARGV,
                                    "description": "the command, program name first; never a shell string"}}}


class RemoteCommandTools:
    """The read-only command tools of one environment, each call run remotely under a signed envelope."""

    def __init__(self, policy: CommandPolicy, client: Client, key: LocalKey, *, deployment: str, environment: str,
                 run_prefix: str = "sandbox", queue: str = Queue.MAIN.value) -> None:
        self.deployment = deployment
        self.policy = policy
        self.client = client
        self.key = key
        self.environment = environment
        self.run_prefix = run_prefix
        self.queue = queue  # where ExecCommand runs (the main worker's queue)

    def list_tools(self) -> list[ToolSpec]:
        readable = {r.tool for r in self.policy.rules
                    if r.access == "read" and r.channel == "ro" and self.environment in r.environments}
        return [ToolSpec(name=t.name, description=f"{t.description} (command tool: argv only, runs on "
                                                  f"exec.{self.environment}.ro)".strip(),
                         input_schema=_schema(), read_only=True, external_access=True, origin=ToolOrigin.COMMAND)
                for t in self.policy.tools if t.name in readable]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        argv = arguments.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            return ToolResult.failure("argv must be a list of strings, program name first")
        try:
            claims = signer.command_claims(
                self.policy, name, argv, run_id=f"{self.run_prefix}-{uuid.uuid4().hex[:12]}",
                tool_call_id=uuid.uuid4().hex[:16], deployment=self.deployment, environment=self.environment,
                channel="ro", phase="automatic",
                requester=self.key.identity, key=self.key)
        except CommandDenied as denied:
            return ToolResult.failure(f"command refused: {denied.reason}")
        try:
            result = await execute(self.client, tool=name, argv=argv, envelope=signer.sign(claims, self.key),
                                   task_queue=self.queue)
        except ExecRefused as refused:
            return ToolResult.failure(f"{refused.type}: {refused.message}")
        out = result.outcome
        return ToolResult.success({"exit_code": out.exit_code, "stdout": out.stdout, "stderr": out.stderr,
                                   "truncated": out.truncated})
