"""What one executor is: its fixed environment and channel, the command policy, the one credential family it
holds, the agent keys it trusts, and the deployment rules its approvals are judged by.

Nothing here comes from a request. The executor reads it once at start-up from its own settings
(``BAMBOO_EXECUTOR_*``) and the command-tools file, so a request can neither widen the policy nor pick a
credential or a key.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from bamboo.commands.config import load_command_config
from bamboo.commands.credentials import CredentialFamily
from policy.approvers import ApprovalRules
from policy.commands import CommandPolicy
from policy.envelopes import DEFAULT_MAX_ENVELOPE_TTL_S, Channel
from policy.signing import decode_public_key, key_id


class ExecutorConfigError(ValueError):
    """The executor's configuration is unusable; the message says what to fix."""


class ExecutorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    environment: str
    channel: Channel
    policy: CommandPolicy
    # Only the family this executor holds; the others in the command-tools file are dropped at start-up.
    credentials: dict[str, CredentialFamily] = Field(default_factory=dict)
    held_credential: str | None = None
    verification_keys: dict[str, str]  # key id -> base64 Ed25519 public key
    approval_rules: ApprovalRules = Field(default_factory=ApprovalRules)
    gated_environments: tuple[str, ...] = ("prod",)
    max_envelope_ttl_s: int = DEFAULT_MAX_ENVELOPE_TTL_S
    timeout_s: float = 120.0
    output_limit: int = 64 * 1024

    @property
    def actor(self) -> str:
        return f"executor:{self.environment}.{self.channel}"


def verification_keys(public_keys: list[str]) -> dict[str, str]:
    """Key id -> public key for each base64 Ed25519 public key; a one-line error for a malformed one."""
    out: dict[str, str] = {}
    for raw in public_keys:
        value = raw.strip()
        if not value:
            continue
        try:
            decode_public_key(value)
        except ValueError as exc:
            raise ExecutorConfigError(f"verification key {value[:12]}... is unusable: {exc}") from None
        out[key_id(value)] = value
    if not out:
        raise ExecutorConfigError("the executor has no verification key; set BAMBOO_EXECUTOR_VERIFY_KEYS_FILE to a "
                                  "file with the agent's public key (one base64 key a line)")
    return out


class ExecutorSettings(BaseSettings):
    """The executor process's own settings (``BAMBOO_EXECUTOR_``)."""

    model_config = SettingsConfigDict(env_prefix="BAMBOO_EXECUTOR_", extra="ignore")

    verify_keys_file: Path | None = Field(default=None, description="agent public keys, one base64 key a line")
    credential: str | None = Field(default=None, description="the one credential family this executor holds")
    gated_environments: str = Field(default="prod", description="comma-separated environments whose writes pass "
                                                                "the seven production write gates")
    max_envelope_ttl_s: int = Field(default=DEFAULT_MAX_ENVELOPE_TTL_S, ge=10, le=3600)
    timeout_s: float = Field(default=120.0, gt=0)
    output_limit: int = Field(default=64 * 1024, ge=1024)


def load_executor_config(environment: str, channel: Channel, *, tools_file: Path, settings: ExecutorSettings,
                         approval_rules: ApprovalRules) -> ExecutorConfig:
    if settings.verify_keys_file is None:
        raise ExecutorConfigError("set BAMBOO_EXECUTOR_VERIFY_KEYS_FILE to the file with the agent's public key(s)")
    try:
        lines = settings.verify_keys_file.read_text().splitlines()
    except OSError as exc:
        raise ExecutorConfigError(f"cannot read verification keys {settings.verify_keys_file}: {exc.strerror}") from None
    commands = load_command_config(tools_file)
    held = settings.credential
    families: dict[str, CredentialFamily] = {}
    if held is not None:
        if held not in commands.credentials:
            raise ExecutorConfigError(f"credential family {held!r} is not declared in {tools_file}; declare it or "
                                      "fix BAMBOO_EXECUTOR_CREDENTIAL")
        families[held] = commands.credentials[held]
    return ExecutorConfig(
        environment=environment, channel=channel, policy=commands.policy, credentials=families, held_credential=held,
        verification_keys=verification_keys(lines), approval_rules=approval_rules,
        gated_environments=tuple(e.strip() for e in settings.gated_environments.split(",") if e.strip()),
        max_envelope_ttl_s=settings.max_envelope_ttl_s, timeout_s=settings.timeout_s,
        output_limit=settings.output_limit,
    )
