"""Builds every activity object the worker registers, from the services built once in ``worker.services``.

The only place collaborators are constructed and handed to activities (docs/architecture.md): the
sandbox runner, the tool caller behind the bridge, tool selection, the model steps, finalize and the
approver registry. Activities receive them and build nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable

from temporalio.client import Client

from activities.analyze import AnalyzeActivities
from activities.investigation import InvestigationActivities, ProcedureSandboxActivities
from bamboo.analysis.service import AnalysisService
from bamboo.approvals.keys import KeyStore
from bamboo.approvals.admin import PinnedAdmins
from bamboo.approvals.registry import ApproverRegistry
from bamboo.commands.config import load_command_config
from bamboo.executors.tool_caller import RemoteCommandTools
from bamboo.investigation.finalize import Finalizer
from bamboo.investigation.procedure_tools import ProcedureToolCaller
from bamboo.investigation.procedures import ProcedureRepository
from bamboo.investigation.reuse import ProcedureMatcher
from bamboo.investigation.turns import TurnModel
from bamboo.investigation.written import WrittenProcedureReader
from bamboo.llm.metering import SpendMeter
from bamboo.mcp.config import load_servers_config
from bamboo.mcp.factory import build_tool_caller
from bamboo.sandbox.errors import SandboxUnavailable
from bamboo.sandbox.isolation import worker_secret_files
from bamboo.sandbox.runner import SandboxRunner
from bamboo.services import Services
from bamboo.settings import Settings
from bamboo.store import StoreNotConfigured, resolve_store_location
from bamboo.store.first_claims import SessionIds, UsedDecisions
from bamboo.store.vectors import PgVectorIndex
from bamboo.tools.model import ToolSpec
from bamboo.tools.selection import SelectionConfig, ToolSelector, config_namespace

log = logging.getLogger(__name__)


def secret_files(settings: Settings) -> tuple[Path, ...]:
    """The worker's secret files a degraded run must not read: those its settings name, and the audit signing key
    the store signs with, which no setting names when it sits beside the checkpoint file."""
    try:
        store_key = resolve_store_location(settings).signing_key
    except (StoreNotConfigured, OSError, ValueError):  # no store (or an unreadable record of one): no key it signs with
        store_key = None
    return worker_secret_files(settings, store_key)


def runner_from_settings(settings: Settings) -> SandboxRunner:
    """The worker's sandbox as configured; raises SandboxUnavailable (one line saying what to fix) when
    no sandbox of the configured strength can start here."""
    return SandboxRunner(
        isolation=settings.sandbox_isolation, pool_size=settings.sandbox_pool_size, seccomp=settings.sandbox_seccomp,
        uid_first=settings.sandbox_uid_first, uid_count=settings.sandbox_uid_count,
        secret_files=secret_files(settings),
    )


def _servers_fingerprint(settings: Settings) -> str:
    if settings.mcp_servers_config is None:
        return "builtin-only"
    try:
        return load_servers_config(settings.mcp_servers_config).fingerprint()
    except Exception as exc:  # noqa: BLE001 — the composite client reports a bad config; selection still works
        log.warning("tool selection namespace falls back to the config path: %s", exc)
        return str(settings.mcp_servers_config)


def tool_selector(services: Services) -> ToolSelector:
    """Vectors in pgvector, namespaced by the tool configuration and embedder, so differently configured
    deployments sharing a database do not thrash each other's catalogue."""
    settings = services.settings
    namespace = config_namespace(_servers_fingerprint(settings), services.embedder.model_id, services.embedder.dim)
    config = SelectionConfig(budget_margin=settings.tool_budget_margin, max_full_schemas=settings.tool_max_full_schemas,
                             candidate_k=settings.tool_retrieval_candidate_k)
    return ToolSelector(PgVectorIndex(services.store.pool), services.embedder, namespace, config)


def spend_meter(settings: Settings) -> SpendMeter:
    return SpendMeter(settings.price_table(), settings.llm_model, settings.budget())


def analyze_activities(services: Services, tools: ProcedureToolCaller | None = None) -> AnalyzeActivities:
    """With ``tools`` (the investigation's caller), the exploration sees the worker's whole catalogue:
    external MCP tools the operator marked read-only reach it, still under the automatic allow-set."""

    async def catalogue() -> list[ToolSpec]:
        assert tools is not None
        await tools.refresh()  # connects external servers on first use
        return tools.raw_tools()

    return AnalyzeActivities(analysis=AnalysisService(services), llm=services.llm, blobs=services.store.blobs,
                             meter=spend_meter(services.settings), catalogue=catalogue if tools else None)


@dataclass
class InvestigationWiring:
    """What the worker registers: LLM-bound, store-bound and sandbox activities, on their own queues."""

    llm: list[Callable[..., Any]] = field(default_factory=list)
    store: list[Callable[..., Any]] = field(default_factory=list)
    sandbox: list[Callable[..., Any]] = field(default_factory=list)
    tools: ProcedureToolCaller | None = None  # the worker's tool caller, shared with analysis


class CommandToolsConfigError(ValueError):
    """The command-tool settings are incomplete; the message names what to set."""


def command_tools(settings: Settings, client: Client | None) -> RemoteCommandTools | None:
    """The read-only command tools generated code may call, each run by an ``exec.<environment>.ro``
    executor under an envelope the worker's agent key signs (docs/executors.md); None where the deployment
    declares none. Writes are never offered here: see ``RemoteCommandTools``."""
    tools_file, environment, agent = settings.command_tools_file, settings.command_environment, settings.command_agent
    wanted = {"BAMBOO_COMMAND_TOOLS_FILE": tools_file, "BAMBOO_COMMAND_ENVIRONMENT": environment,
              "BAMBOO_COMMAND_AGENT": agent}
    if not any(wanted.values()) or client is None:
        return None
    if not (tools_file and environment and agent):
        missing = [name for name, value in wanted.items() if not value]
        raise CommandToolsConfigError(
            f"command tools in investigations need {', '.join(wanted)}; set {', '.join(missing)} too "
            "(or unset the others)")
    policy = load_command_config(tools_file).policy
    key = KeyStore(settings.resolved_keys_dir()).load(agent)
    return RemoteCommandTools(policy, client, key, deployment=settings.resolved_deployment(), environment=environment)


def trust_root(settings: Settings) -> PinnedAdmins:
    """The administrators this deployment pins, read once now so a worker with an unusable file, or with the
    demo's administrator on a deployment of its own, refuses to start instead of refusing every request."""
    admins = PinnedAdmins.of(settings)
    admins.root()
    return admins


def investigation_activities(services: Services, client: Client | None = None) -> InvestigationWiring:
    """Wire the activities once per worker. Without a usable sandbox interpreter this worker serves no
    ``execute_code`` (runs wait for a worker that has one) instead of refusing to start at all. With a
    Temporal ``client`` and the command-tool settings, the catalogue also holds the command tools."""
    settings, store = services.settings, services.store
    runner: SandboxRunner | None
    try:
        runner = runner_from_settings(settings)
        services.closers.append(runner.close)  # pooled children must not outlive the worker
    except SandboxUnavailable as exc:
        log.error("this worker will not run sandboxed code: %s", exc)
        runner = None
    commands = command_tools(settings, client)
    tools = ProcedureToolCaller(
        build_tool_caller(settings, extra_builtins=[commands] if commands else []),
        ProcedureRepository(store.pool), runner,
        store.audit, store.blobs, allow_mutating_autorun=settings.allow_mutating_autorun,
    )
    selector = tool_selector(services)
    acts = InvestigationActivities(
        tools=tools, selector=selector, model=TurnModel(services.llm, selector, settings.llm_context_window),
        finalizer=Finalizer(store.knowledge, tools.repository, services.embedder, settings.canonical_match_threshold),
        registry=ApproverRegistry(store.pool, store.audit, trust_root(settings)), audit_log=store.audit,
        approval_rules=settings.approval_rules(), allow_mutating_autorun=settings.allow_mutating_autorun,
        meter=spend_meter(settings),
        matcher=ProcedureMatcher(tools.repository, services.embedder, tools,
                                 settings.pseudonym_key.get_secret_value().encode(), settings.reuse_settings()),
        written=WrittenProcedureReader(store.pool, services.embedder), session_ids=SessionIds(store.pool),
    )
    sandbox = [] if runner is None else [
        ProcedureSandboxActivities(runner=runner, tools=tools, audit=store.audit, blobs=store.blobs,
                                   used_decisions=UsedDecisions(store.pool)).execute_code]
    return InvestigationWiring(
        llm=[acts.intent, acts.codegen, acts.summary],
        store=[acts.policy_context, acts.audit, acts.grant, acts.revoke_grants, acts.finalize,
               acts.reuse_candidates, acts.procedure_ran, acts.written_procedures],
        sandbox=sandbox, tools=tools,
    )
