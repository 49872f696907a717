"""Effective configuration: environment (``BAMBOO_`` prefix), an optional ``.env``, then defaults.

One object describes where every service lives so the same code runs against the embedded
stack on a laptop and against a Temporal cluster and a managed Postgres in production.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AnyUrl, Field, SecretStr, TypeAdapter, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bamboo.models.spend import Budget, ModelPrice, PriceTable
from policy.approvers import ApprovalRules
from policy.reuse import ReuseSettings
from policy.secret_names import is_secret_parameter
from policy.signing import DEFAULT_DEPLOYMENT, DEPLOYMENT_PATTERN, EMBEDDED_DEPLOYMENT

_URL = TypeAdapter(AnyUrl)


def _http_url(value: str) -> str:
    """An http(s) URL, checked with pydantic's URL type but kept as written: clients join paths onto it, and
    pydantic's normal form would add a slash. The message never repeats the value, which may hold a key.
    Empty stays empty: for the optional endpoints it means "none" (the local model, no exporter)."""
    if not value:
        return value
    try:
        parsed = _URL.validate_python(value)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Input should be a valid URL, ")
        raise ValueError(f"not a URL ({reason}); expected http(s)://host[:port][/path]") from None
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"the scheme is {parsed.scheme!r}; expected http(s)://host[:port][/path]")
    return value


def _host_port(value: str) -> str:
    """``host:port`` with a port a service can listen on (1-65535); empty means off where that is allowed."""
    if not value:
        return value
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"expected host:port with a port from 1 to 65535, got {value!r}")
    return value


HttpUrlText = Annotated[str, AfterValidator(_http_url)]
HostPort = Annotated[str, AfterValidator(_host_port)]
Port = Annotated[int, Field(ge=0, le=65535, description="a TCP port; 0 = none or any free one")]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BAMBOO_", env_file=".env", extra="ignore")

    # --- embedded stack / locations -------------------------------------------------------
    data_dir: Path = Field(default=Path(".bamboo"), description="Where the embedded stack keeps its state")
    temporal_address: HostPort = Field(default="127.0.0.1:7233", description="Temporal frontend host:port")
    temporal_namespace: str = "default"
    temporal_ui_port: Port = 8233
    temporal_embedded: bool = Field(default=True, description="`bamboo dev up` starts a Temporal dev server")
    database_url: str | None = Field(
        default=None,
        description="postgresql:// URL; empty means the embedded pgserver under data_dir",
    )
    database_owner_url: str | None = Field(
        default=None, description="the schema owner's URL, for migrations; the app then connects with database_url "
                                  "as a role that cannot rewrite the audit log (empty: migrate with database_url)")
    store_outage_wait_s: float = Field(
        default=3600.0, ge=0, description="how long a worker's store call waits for an unreachable database "
                                          "(heartbeating) before its activity fails")

    # --- audit log ----------------------------------------------------------------------------
    audit_checkpoint_file: Path | None = Field(
        default=None, description="where the signed head of the audit chain is kept, outside the database "
                                  "(empty: <data_dir>/keys/audit-checkpoint.json for the embedded stack, none otherwise)")
    audit_signing_key: Path | None = Field(
        default=None, description="Ed25519 key that signs audit checkpoints; verify needs only its .pub "
                                  "(empty: audit-signing.key beside the checkpoint file)")

    # --- LLM --------------------------------------------------------------------------------
    llm_base_url: HttpUrlText | None = Field(default=None, description="OpenAI-compatible endpoint; empty = the local offline model")
    llm_model: str = "local"
    llm_api_key: SecretStr = SecretStr("not-needed")
    llm_timeout_s: float = 120.0
    llm_max_tokens: int = Field(default=768, description="Cap on generated tokens per call; bounds a rambling model")
    llm_local_port: Port = 8765
    llm_local_weights: Literal["auto", "smollm2-135m", "gemma3-270m"] = Field(
        default="auto", description="Offline model when no endpoint is set (docs/offline-models.md); auto = the "
                                    "measured default among those installed")
    # Model calls one worker makes at once, across everything it runs (populate slices, escalated incidents,
    # analyses, investigations): its LLM queue's activity slots and one gate on every model call. A batch's
    # --concurrency gets at most the sum over the workers, and `bamboo populate` says so at start. 32, not 8:
    # a served model (a hosted API, vLLM) answers in seconds and serves dozens of requests at once, and with
    # 8 a batch asking 32 got half of it (issue 25: a 2 s model, c=32, throughput halved); a waiting call
    # costs the worker a coroutine and a connection, not a thread. Lower it to what the endpoint can serve
    # (the offline model decodes 2 requests at a time and queues the rest).
    llm_concurrency: int = Field(default=32, ge=1, le=1024, description="model calls one worker makes at once "
                                 "(its LLM queue's slots); a batch's --concurrency gets at most the workers' sum")
    # --- spend limits (post-call stop-loss; docs/operations.md) ----------------------------
    llm_prices: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description='USD per million tokens by model, as JSON: {"gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10}}')
    budget_run_usd: float | None = Field(default=None, gt=0, description="one analysis or investigation turn")
    budget_session_usd: float | None = Field(default=None, gt=0, description="one investigation session")
    budget_batch_usd: float | None = Field(default=None, gt=0, description="one populate or analyze batch")
    llm_context_window: int = Field(
        default=0, ge=0, description="Tokens of the model's window; 0 = ask the server (llama.cpp, vLLM), else 8192")

    # --- tool selection for large catalogues ------------------------------------------------
    tool_budget_margin: int = Field(default=1024, ge=0, description="Tokens kept for the answer and headroom")
    tool_max_full_schemas: int = Field(default=25, ge=1, description="Tools shown with a full schema, at most")
    tool_retrieval_candidate_k: int = Field(default=0, ge=0, description="Ranking pool per source; 0 = max(40, 3 x the cap)")

    # --- embeddings -------------------------------------------------------------------------
    embedding_base_url: HttpUrlText | None = Field(default=None, description="OpenAI-compatible /embeddings; empty = local MiniLM")
    embedding_model: str = "all-MiniLM-L6-v2"
    embedding_api_key: SecretStr = SecretStr("not-needed")
    embedding_dim: int = 384

    # --- extraction / accumulation -------------------------------------------------------------
    extraction_strategy: Literal["panda", "llm"] = "panda"
    pseudonym_key: SecretStr = SecretStr("change-me-per-deployment")
    max_review_retries: int = 2
    populate_concurrency: int = 8
    populate_continue_as_new_every: int | None = Field(
        default=None, ge=1, description="incidents per PopulateBatch run; unset: 200 with one workflow per incident, "
                                        "5000 in slices")
    canonical_match_threshold: float = 0.9

    # --- analysis ---------------------------------------------------------------------------
    exploratory_investigation_threshold: float = Field(
        default=0.5, ge=0.0, le=1.0,
        description="Below this diagnosis confidence an exploratory read-only investigation runs")

    # --- sandbox ----------------------------------------------------------------------------
    sandbox_isolation: Literal["auto", "bwrap", "degraded"] = Field(
        default="auto", description="auto/bwrap = bubblewrap, and no sandbox at all when it cannot start here; "
                                    "degraded = the operator accepts a sandbox without namespaces (root worker only), "
                                    "which refuses unattended runs and state-changing tools")
    sandbox_pool_size: int = Field(default=2, ge=0, le=32, description="pre-started children (latency)")
    sandbox_seccomp: bool = Field(default=True, description="the seccomp filter; off only to measure what it costs")
    sandbox_uid_first: int = Field(default=1_000_000_000, ge=1000, le=4_000_000_000,
                                   description="first of the uids leased to sandbox runs, one per run (root worker)")
    sandbox_uid_count: int = Field(default=4096, ge=16, le=1_000_000, description="how many uids runs may lease")

    # --- PanDA ------------------------------------------------------------------------------
    panda_api_url: HttpUrlText = "http://127.0.0.1:8780/api/v1"
    panda_monitor_url: HttpUrlText = "http://127.0.0.1:8780"
    panda_auth: Literal["none", "oidc", "x509"] = "none"
    panda_log_hosts: list[str] = Field(
        default_factory=list,
        description="Extra hosts ('host' or 'host:port') whose errorDialog log links may be fetched, over http or "
                    "https (the API's and the monitor's own origins always)")
    panda_oidc_token: SecretStr | None = None
    panda_auth_vo: str | None = Field(
        default=None, description="VO the OIDC token is for, sent as the Origin header (panda-client's PANDA_AUTH_VO)")
    panda_x509_proxy: Path | None = None
    mcp_servers_config: Path | None = None
    command_tools_file: Path | None = Field(
        default=None, description="TOML file declaring command tools, their rules and credential families")
    command_environment: str | None = Field(
        default=None, description="Environment whose read-only executors (exec.<environment>.ro) generated code "
                                  "reads through with the command tools; empty = none in investigations")
    command_agent: str | None = Field(
        default=None, description="Identity of the worker's agent key in BAMBOO_KEYS_DIR that signs command-tool "
                                  "envelopes; executors list its public key")

    # --- trust model ------------------------------------------------------------------------
    # Read by the worker only: a session judges every request with the worker's rules and registry, so a
    # client's settings can neither weaken nor strengthen them.
    require_signatures: bool = Field(
        default=True, description="Refuse unsigned messages and decisions (keys: `bamboo keys`)")
    require_distinct_approver: bool = Field(
        default=True, description="State-changing code needs an approver other than its requester")
    allow_mutating_autorun: bool = Field(
        default=False, description="Offer state-changing procedures to the interactive planner (never run unreviewed)")
    max_signature_ttl_s: int = Field(default=24 * 3600, ge=60, le=7 * 24 * 3600,
                                     description="Longest validity a signed request may claim")
    keys_dir: Path | None = Field(default=None, description="This operator's signing keys; empty = <data_dir>/keys")
    admin_keys_file: Path | None = Field(
        default=None, description="The administrators' public keys this deployment pins ('IDENTITY KEY' a line), "
                                  "the root of the approver registry; empty = <data_dir>/admin-keys on the embedded "
                                  "stack (the demo's), none otherwise (docs/trust-model.md)")
    deployment: str | None = Field(
        default=None, pattern=DEPLOYMENT_PATTERN,
        description="This deployment's name, signed into every administrator's statement: a statement counts only in "
                    "the deployment it names, so deployments pinning the same administrator must each name their own "
                    f"(staging, production); empty = {EMBEDDED_DEPLOYMENT!r} on the embedded stack; required with a "
                    f"database of the deployment's own (its processes refuse to start without it; a client "
                    f"left without it signs for {DEFAULT_DEPLOYMENT!r}) (docs/trust-model.md)")
    investigation_idle_timeout_s: int = 7 * 24 * 3600
    reuse_match_threshold: float = Field(
        default=0.7, ge=0.0, le=1.0, description="Least similarity of a request to a stored read-only procedure's "
                                                 "triggers for a turn to propose it instead of generating code")
    reuse_state_changing_threshold: float = Field(
        default=0.8, ge=0.0, le=1.0, description="The same for a stored procedure that changes state (stricter)")

    # --- observability ----------------------------------------------------------------------
    otel_exporter: Literal["none", "console", "otlp"] = Field(
        default="none", description="Traces: console writes to <data_dir>/logs/<service>-spans.log")
    otel_endpoint: HttpUrlText | None = Field(default=None, description="OTLP/HTTP base URL, e.g. http://collector:4318")
    metrics_bind: HostPort | None = Field(
        default=None, description="host:port where a worker serves Prometheus metrics (/metrics); empty = off")

    @model_validator(mode="after")
    def _budgets_need_a_price(self) -> "Settings":
        if self.budget().limited and self.price_table().price(self.llm_model) is None:
            raise ValueError(f"a spend budget is set but BAMBOO_LLM_PRICES has no price for the model "
                             f"{self.llm_model!r}; add it or unset the BAMBOO_BUDGET_* settings")
        return self

    def budget(self) -> Budget:
        """The deployment's spend limits, as the worker hands them to every run."""
        return Budget(run_usd=self.budget_run_usd, session_usd=self.budget_session_usd,
                      batch_usd=self.budget_batch_usd)

    def price_table(self) -> PriceTable:
        return PriceTable(prices=self.llm_prices)

    def resolved_data_dir(self) -> Path:
        return self.data_dir.expanduser().resolve()

    def resolved_keys_dir(self) -> Path:
        return (self.keys_dir or self.resolved_data_dir() / "keys").expanduser()

    def resolved_admin_keys_file(self) -> Path | None:
        if self.admin_keys_file is not None:
            return self.admin_keys_file.expanduser()
        return self.resolved_data_dir() / "admin-keys" if self.embedded_database else None

    def resolved_deployment(self) -> str:
        if self.deployment:
            return self.deployment
        return EMBEDDED_DEPLOYMENT if self.embedded_database else DEFAULT_DEPLOYMENT

    @property
    def embedded_database(self) -> bool:
        """The embedded stack (the demo's): no database of the deployment's own is configured."""
        return self.database_url is None

    def approval_rules(self) -> ApprovalRules:
        """The deployment's approval rules, as the worker hands them to every session."""
        return ApprovalRules(
            require_signatures=self.require_signatures, require_distinct_approver=self.require_distinct_approver,
            allow_mutating_autorun=self.allow_mutating_autorun, max_signature_ttl_s=self.max_signature_ttl_s,
        )

    def reuse_settings(self) -> ReuseSettings:
        """How near a request must be to a stored procedure for a turn to reuse it (docs/trust-model.md)."""
        return ReuseSettings(threshold=self.reuse_match_threshold,
                             state_changing_threshold=self.reuse_state_changing_threshold)

    def masked(self) -> dict[str, Any]:
        """The effective configuration with every secret replaced, safe to print or log (text and JSON alike):
        every secret setting (typed ``SecretStr``), every secret-named key of a mapping, and the secret parts of
        every URL or ``user:password@host`` value, however deep in a list or mapping it sits."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump().items():
            if isinstance(getattr(self, name), SecretStr):
                out[name] = MASK if value else None
            else:
                out[name] = mask_value(value)
        return out


def mask_value(value: Any) -> Any:
    """``value`` with the secret parts of its URLs and of its secret-named mapping keys replaced; paths as text."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str):
        return mask_url(value) if "://" in value or "@" in value else value
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and is_secret_parameter(k) and v not in (None, "") else mask_value(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_value(v) for v in value]
    return value


def mask_url(url: str) -> str:
    """The URL with its password and every secret-named query or fragment parameter (``password=``,
    ``token=``, ``api_key=``, ``key=``, ...) replaced: safe to print. Structure and other parameters stay
    readable. A value without a scheme (``user:password@host``, a DSN's tail) is masked the same way."""
    schemeless = "://" not in url
    parts = urlsplit(f"//{url}" if schemeless else url)
    netloc = parts.netloc
    if "@" in netloc:
        creds, _, host = netloc.rpartition("@")
        user, colon, _ = creds.partition(":")
        # user:password keeps the user; a lone userinfo may be a token (https://TOKEN@host) and is masked whole,
        # unless there is no scheme: then it is the name part of an address (alice@example.org)
        netloc = f"{user}:{MASK}@{host}" if colon else (netloc if schemeless else f"{MASK}@{host}")
    masked = urlunsplit((parts.scheme, netloc, parts.path, _mask_params(parts.query), _mask_params(parts.fragment)))
    return masked.removeprefix("//") if schemeless else masked


def _mask_params(params: str) -> str:
    return "&".join(
        f"{key}={MASK}" if is_secret_parameter(key) and val else (f"{key}={val}" if eq else key)
        for key, eq, val in (item.partition("=") for item in params.split("&") if item))


MASK = "********"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
