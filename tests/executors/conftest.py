"""Real executors for the tests: a Temporal dev server, Postgres, the PanDA simulator on loopback, real
``curl`` and ``git``, an administrator whose key the tests pin, operators' keys registered by that
administrator, and an in-process executor worker per test polling ``exec.<environment>.<channel>`` with the
configuration the test gives it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from bamboo.approvals.admin import FixedAdmins
from bamboo.approvals.keys import KeyStore, LocalKey
from bamboo.approvals.registry import ApproverRegistry
from bamboo.commands.credentials import CredentialFamily
from bamboo.executors import signer
from activities.executor import ExecutorActivities
from bamboo.executors.service import CommandExecutor
from bamboo.executors.config import ExecutorConfig, keyed
from bamboo.executors.client import ExecRefused, refusal_of
from bamboo.executors.contract import ExecRequest, ExecResult
from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.simulator.world import build_world
from bamboo.store.audit_log import PostgresAuditLog
from bamboo.store.db import open_pool
from bamboo.store.executor_state import ExecutorState
from bamboo.temporal_client import connect
from policy.approvers import ApprovalRules, Role
from policy.commands import CommandPolicy, CommandRule, CommandTool, OptionSpec, PositionalSpec, TargetSpec
from policy.envelopes import DecisionEnvelope, EnvelopeClaims, VerificationKey
from policy.trust_root import PinnedAdmin, TrustRoot
from policy.signing import DEFAULT_DEPLOYMENT
from tests.panda.incidents import RUNNING_TASK, write_incidents
from worker.registry import workflow_runner
from workflows.exec_command import ExecCall, ExecCommand

CURL = str(Path(shutil.which("curl") or "/usr/bin/curl").resolve())
GIT = str(Path(shutil.which("git") or "/usr/bin/git").resolve())
PANDA_FAMILY = CredentialFamily(name="panda_prod_rw", env={"PANDA_AUTH_TOKEN": "EXEC_PANDA_PROD_RW_TOKEN"})
GIT_FAMILY = CredentialFamily(name="git_prod_rw", env={"GIT_PUSH_TOKEN": "EXEC_GIT_PROD_RW_TOKEN"})
SOURCE_ENV = {"PATH": "/usr/bin:/bin", "EXEC_PANDA_PROD_RW_TOKEN": "panda-prod-rw-value",
              "EXEC_GIT_PROD_RW_TOKEN": "git-prod-rw-value", "OPENAI_API_KEY": "sk-model-provider-key"}
TASK = RUNNING_TASK


def kill_target(task: int = TASK) -> str:
    return f"panda:task:{task}"


def command_policy(panda_host: str, repos: Path, *, with_write_rules: bool = True) -> CommandPolicy:
    """curl against the PanDA API (GET on ro in staging and prod, task kill POST on rw in prod) and git on
    repositories under ``repos`` (log on ro, push with a mandatory dry run on rw in prod)."""
    silent = OptionSpec(name="--silent", aliases=["-s"])
    fail = OptionSpec(name="--fail", aliases=["-f"])
    # The PanDA API takes a typed JSON body (a form's task_id arrives as text and is refused).
    task_id = TargetSpec(source="json", field="task_id", template="panda:task:{value}", value_pattern=r"[0-9]+")
    rules = [
        CommandRule(name="panda_get_status", tool="panda_curl", access="read", environments=["staging", "prod"],
                    channel="ro", method="GET", options=[silent, fail], positionals=[PositionalSpec(name="url", value="url")],
                    allowed_hosts=[panda_host], url_paths=[r"/api/v1/task/get_status"],
                    targets=[TargetSpec(source="query", field="task_id", template="panda:task:{value}",
                                        value_pattern=r"[0-9]+")]),
        CommandRule(name="git_log", tool="config_git", access="read", environments=["staging", "prod"], channel="ro",
                    global_options=[OptionSpec(name="-C", value="path")], subcommand=["log"],
                    options=[OptionSpec(name="--oneline")],
                    targets=[TargetSpec(source="option", field="-C", template="git:{value}")]),
    ]
    if with_write_rules:
        rules += [
            CommandRule(name="panda_task_kill", tool="panda_curl", access="write", environments=["prod"], channel="rw",
                        credential="panda_prod_rw", method="POST",
                        options=[silent, fail, OptionSpec(name="--json", value="json")],
                        positionals=[PositionalSpec(name="url", value="url")], allowed_hosts=[panda_host],
                        url_paths=[r"/api/v1/task/kill"], targets=[task_id]),
            CommandRule(name="git_push", tool="config_git", access="write", environments=["prod"], channel="rw",
                        credential="git_prod_rw", supports_dry_run=True, dry_run_flag="--dry-run",
                        global_options=[OptionSpec(name="-C", value="path")], subcommand=["push"],
                        positionals=[PositionalSpec(name="remote", value="enum", choices=["origin"]),
                                     PositionalSpec(name="refspec", value="enum", choices=["main"])],
                        targets=[TargetSpec(source="option", field="-C", template="git:{value}")]),
        ]
    tools = [CommandTool(name="panda_curl", executable=CURL, dialect="curl", description="curl against PanDA"),
             # The configuration repository's server is a bare repository on this host, the clone's origin.
             CommandTool(name="config_git", executable=GIT, dialect="git", root=str(repos),
                         description="git on configuration repositories")]
    return CommandPolicy(tools=tools, rules=rules,
                         credentials={"panda_prod_rw": ["PANDA_AUTH_TOKEN"], "git_prod_rw": ["GIT_PUSH_TOKEN"]})


@dataclass
class Harness:
    client: Client
    pool: Any
    state: ExecutorState
    audit: PostgresAuditLog
    registry: ApproverRegistry
    policy: CommandPolicy
    admin: LocalKey  # the pinned administrator: registers the people, signs the grants
    admins: FixedAdmins
    agent: LocalKey
    requester: LocalKey
    approver: LocalKey
    bystander: LocalKey
    simulator: PandaSimulator | None  # None: the tests address a server of their own
    repos: Path
    queue: str
    api_url: str
    tasks: list[asyncio.Task] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"{self.api_url}{path}"

    def kill_argv(self, task: int = TASK) -> list[str]:
        return ["curl", "-s", "-f", "--json", f'{{"task_id":{task}}}', self.url("/task/kill")]

    def status_argv(self, task: int = TASK) -> list[str]:
        return ["curl", "-s", "-f", self.url(f"/task/get_status?task_id={task}")]

    def kills_on_server(self, task: int = TASK) -> int:
        calls = httpx.get(f"{self.simulator.base_url}/sim/calls").json()
        return sum(1 for c in calls if c["endpoint"] == "task/kill" and c["task_id"] == task)

    def config(self, environment: str, channel: str, **changes: Any) -> ExecutorConfig:
        values: dict[str, Any] = dict(
            environment=environment, channel=channel, policy=self.policy,
            credentials={"panda_prod_rw": PANDA_FAMILY} if channel == "rw" else {},
            held_credential="panda_prod_rw" if channel == "rw" else None,
            verification_keys=keyed([self.agent_key()]), approval_rules=ApprovalRules())
        values.update(changes)
        return ExecutorConfig(**values)

    def agent_key(self) -> VerificationKey:
        return VerificationKey(kind="agent", identity=self.agent.identity, public_key=self.agent.public_key)

    def person_key(self, key: LocalKey) -> VerificationKey:
        return VerificationKey(kind="person", identity=key.identity, public_key=key.public_key)

    @contextlib.asynccontextmanager
    async def executor(self, config: ExecutorConfig, source: dict[str, str] | None = None):
        """An executor worker polling exec.<environment>.<channel> with ``config``, for the block's length."""
        from bamboo.executors.contract import executor_queue

        impl = CommandExecutor(config, self.state, self.audit, self.registry, self.admins,
                               source=SOURCE_ENV if source is None else source)
        async with Worker(self.client, task_queue=executor_queue(config.environment, config.channel),
                          activities=[ExecutorActivities(impl).run_command]):
            yield impl

    def claims(self, environment: str, channel: str, argv: list[str], *, tool: str = "panda_curl",
               phase: str = "interactive", ttl_s: float = 120, now: datetime | None = None,
               policy: CommandPolicy | None = None, requester: str | None = None,
               key: LocalKey | None = None) -> EnvelopeClaims:
        return signer.command_claims(policy or self.policy, tool, argv, run_id=f"run-{uuid.uuid4().hex[:8]}",
                                     tool_call_id=f"call-{uuid.uuid4().hex[:8]}", deployment=DEFAULT_DEPLOYMENT,
                                     environment=environment,
                                     channel=channel, phase=phase, requester=requester or self.requester.identity,
                                     key=key or self.agent, ttl_s=ttl_s, now=now)

    def approved(self, claims: EnvelopeClaims, approver: LocalKey | None = None) -> EnvelopeClaims:
        decision = signer.approve(claims, approver or self.approver, deployment=DEFAULT_DEPLOYMENT)
        return claims.model_copy(update={"approval": decision})

    def sign(self, claims: EnvelopeClaims, key: LocalKey | None = None) -> DecisionEnvelope:
        return signer.sign(claims, key or self.agent)

    def signed_grant(self, targets: list[str], *, rule: str = "panda_task_kill", tool: str = "panda_curl",
                     executions: int = 1, repetitions: int = 1, ttl_s: float = 3600, admin: LocalKey | None = None):
        return signer.sign_grant(admin or self.admin, environment="prod", tool=tool, rule=rule, targets=targets,
                                 max_executions=executions, max_repetitions=repetitions,
                                 expires_at=datetime.now(timezone.utc) + timedelta(seconds=ttl_s),
                                 deployment=self.admins.root().deployment)

    async def grant(self, targets: list[str], **terms: Any):
        """A grant the pinned administrator signed, stored as `bamboo exec grant` stores it."""
        return await self.state.record_grant(self.signed_grant(targets, **terms), self.admins.root())

    async def revoke(self, grant_id: str) -> bool:
        """The pinned administrator's signed revocation, stored as `bamboo exec revoke` stores it."""
        return await self.state.record_revocation(signer.sign_revocation(self.admin, grant_id, deployment=self.admins.root().deployment), self.admins.root())

    async def executions_used(self, grant_id: str) -> int:
        grant = await self.state.grant(grant_id, self.admins.root())
        assert grant is not None, f"grant {grant_id} does not count"
        return grant.executions_used

    async def call(self, environment: str, channel: str, tool: str, argv: list[str],
                   envelope: DecisionEnvelope) -> ExecResult:
        """Through ExecCommand to the executor the envelope names (``environment``/``channel`` document the
        route the test expects; a misrouted envelope is the executor's to refuse, see ``route``)."""
        return await self.route(environment, channel, tool, argv, envelope)

    async def route(self, environment: str, channel: str, tool: str, argv: list[str],
                    envelope: DecisionEnvelope) -> ExecResult:
        call = ExecCall(environment=environment, channel=channel,
                        request=ExecRequest(tool=tool, argv=argv, envelope=envelope))
        try:
            return await self.client.execute_workflow(ExecCommand.run, call, id=f"exec-{uuid.uuid4().hex}",
                                                      task_queue=self.queue)
        except WorkflowFailureError as exc:
            raise refusal_of(exc) from None

    async def refusal(self, environment: str, channel: str, tool: str, argv: list[str],
                      envelope: DecisionEnvelope) -> ExecRefused:
        with pytest.raises(ExecRefused) as refused:
            await self.call(environment, channel, tool, argv, envelope)
        return refused.value

    async def audit_kinds(self) -> list[tuple[str, str]]:
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT kind, body->>'refusal' FROM audit WHERE kind LIKE 'executor_%%' ORDER BY seq")).fetchall()
        return [(k, r) for k, r in rows]


@pytest.fixture(scope="session")
def incidents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_incidents(tmp_path_factory.mktemp("incidents"))


@pytest.fixture(scope="session")
def panda_server(incidents: Path):
    with PandaSimulator(incidents) as sim:
        yield sim


@pytest.fixture
def simulator(panda_server: PandaSimulator, incidents: Path) -> PandaSimulator:
    """The simulator with its world as the incidents describe it and no calls recorded: a kill an earlier
    test made (JEDI aborts the task a few seconds later) does not leak into the next."""
    panda_server.state.reset(build_world(incidents))
    return panda_server


def _git(*args: str, cwd: Path | None = None) -> str:
    env = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run([GIT, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repos(tmp_path: Path) -> Path:
    """A bare repository (the server, outside the root) and a clone of it under the tool's root."""
    root = tmp_path.resolve() / "repos"
    root.mkdir()
    server = tmp_path.resolve() / "server.git"
    _git("init", "--bare", "-b", "main", str(server))
    clone = root / "config"
    _git("init", "-b", "main", str(clone))
    (clone / "site.yaml").write_text("site: SIM-SITE-A\n")
    _git("add", "site.yaml", cwd=clone)
    _git("commit", "-m", "first", cwd=clone)
    _git("remote", "add", "origin", str(server), cwd=clone)
    _git("push", "origin", "main", cwd=clone)
    return root


@pytest.fixture
async def harness(stack, database_url, simulator, repos, tmp_path):
    async with open_harness(stack, database_url, simulator.api_url, repos, tmp_path, simulator=simulator) as h:
        yield h


@contextlib.asynccontextmanager
async def open_harness(stack, database_url: str, api_url: str, repos: Path, tmp_path: Path, *,
                       simulator: PandaSimulator | None = None):
    """Everything but the executor: the store, a pinned administrator, the approver registry with alice, bob
    and carol registered by that administrator, the agent's key, and an ExecCommand worker; the command policy
    allows curl against the PanDA API at ``api_url``."""
    pool = await open_pool(database_url, 384, "scripted-embedding", max_size=4)
    audit = PostgresAuditLog(pool)
    keys = KeyStore(tmp_path / "keys")
    admin, agent, requester, approver, bystander = (keys.create(n) for n in ("admin", "agent", "alice", "bob",
                                                                               "carol"))
    admins = FixedAdmins(TrustRoot(admins=(PinnedAdmin(identity=admin.identity, public_key=admin.public_key),)))
    registry = ApproverRegistry(pool, audit, admins)
    await registry.register(admin, "alice", requester.public_key, [Role.REQUEST, Role.APPROVE_STATE_CHANGING])
    await registry.register(admin, "bob", approver.public_key, [Role.APPROVE_STATE_CHANGING])
    await registry.register(admin, "carol", bystander.public_key, [Role.APPROVE])
    client = await connect(stack.settings(database_url, "http://127.0.0.1:9"))
    queue = f"exec-test-{uuid.uuid4().hex[:8]}"
    h = Harness(client=client, pool=pool, state=ExecutorState(pool), audit=audit, registry=registry,
                policy=command_policy(httpx.URL(api_url).netloc.decode(), repos), admin=admin, admins=admins,
                agent=agent, requester=requester,
                approver=approver, bystander=bystander, simulator=simulator, repos=repos, queue=queue,
                api_url=api_url)
    try:
        async with Worker(client, task_queue=queue, workflows=[ExecCommand], workflow_runner=workflow_runner()):
            yield h
    finally:
        await pool.close()
