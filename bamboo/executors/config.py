"""What one executor is: its fixed environment and channel, the command policy, the one credential family it
holds, the keys it trusts (each naming an identity and whether it is the agent's or a person's), and the
deployment rules its approvals are judged by.

Nothing here comes from a request. The executor reads it once at start-up from its own settings
(``BAMBOO_EXECUTOR_*``) and the command-tools file, so a request can neither widen the policy nor pick a
credential or a key.

The verification keys file holds one key a line, ``agent IDENTITY BASE64KEY`` or ``person IDENTITY
BASE64KEY``: a key without an identity would let whoever holds it claim to be anyone, so the old bare-key
lines are refused, not guessed at.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bamboo.commands.config import load_command_config
from bamboo.commands.credentials import CredentialFamily
from policy.approvers import ApprovalRules
from policy.commands import CommandPolicy
from policy.envelopes import DEFAULT_MAX_ENVELOPE_TTL_S, Channel, KeyKind, VerificationKey


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
    verification_keys: dict[str, VerificationKey]  # key id -> the key, whose it is and its kind
    approval_rules: ApprovalRules = Field(default_factory=ApprovalRules)
    gated_environments: tuple[str, ...] = ("prod",)
    ungated_environments: tuple[str, ...] = ("staging",)
    max_envelope_ttl_s: int = DEFAULT_MAX_ENVELOPE_TTL_S
    timeout_s: float = 120.0
    output_limit: int = 64 * 1024

    @model_validator(mode="after")
    def _keys_by_id(self) -> "ExecutorConfig":
        if any(kid != key.key_id for kid, key in self.verification_keys.items()):
            raise ValueError("verification_keys must map each key's own key id to it")
        why = unclassified(self.environment, self.gated_environments, self.ungated_environments)
        if why:
            raise ValueError(why)
        return self

    @property
    def actor(self) -> str:
        return f"executor:{self.environment}.{self.channel}"


KEY_LINE_FORMAT = "'agent IDENTITY BASE64KEY' or 'person IDENTITY BASE64KEY'"


def unclassified(environment: str, gated: tuple[str, ...], ungated: tuple[str, ...]) -> str | None:
    """Why an executor may not serve ``environment``: it must be named gated (every write passes the seven
    production gates) or ungated, and not both. Gating by name alone failed open: an executor started for
    ``production`` or ``prod-eu`` instead of ``prod`` ran writes with no grant, dry run or approval."""
    if environment in gated and environment in ungated:
        return (f"the environment {environment!r} is named both gated and ungated; remove it from "
                "BAMBOO_EXECUTOR_GATED_ENVIRONMENTS or BAMBOO_EXECUTOR_UNGATED_ENVIRONMENTS")
    if environment not in gated and environment not in ungated:
        return (f"the environment {environment!r} is neither gated ({', '.join(gated) or 'none'}) nor ungated "
                f"({', '.join(ungated) or 'none'}); add it to BAMBOO_EXECUTOR_GATED_ENVIRONMENTS (its writes pass "
                "the seven production gates) or, for a test environment, BAMBOO_EXECUTOR_UNGATED_ENVIRONMENTS")
    return None


def keyed(keys: list[VerificationKey]) -> dict[str, VerificationKey]:
    """Key id -> key, as ExecutorConfig holds them."""
    return {k.key_id: k for k in keys}


def parse_verification_keys(text: str, *, source: str = "the verification keys file") -> dict[str, VerificationKey]:
    """Key id -> key for each ``KIND IDENTITY BASE64KEY`` line (blank lines and ``#`` comments skipped).

    Every malformed line is a one-line error naming the line; so is a bare key (the format before keys named
    their identity) and a key listed twice, since one key cannot be two people or both agent and person.
    """
    out: dict[str, VerificationKey] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) == 1:
            raise ExecutorConfigError(f"{source} line {number} is a bare key; each line now names whose key it is: "
                                      f"{KEY_LINE_FORMAT}")
        if len(parts) != 3 or parts[0] not in ("agent", "person"):
            raise ExecutorConfigError(f"{source} line {number}: expected {KEY_LINE_FORMAT}")
        kind: KeyKind = "agent" if parts[0] == "agent" else "person"
        try:
            key = VerificationKey(kind=kind, identity=parts[1], public_key=parts[2])
        except ValidationError as exc:
            reason = str(exc.errors()[0].get("msg", "invalid")).splitlines()[0]
            raise ExecutorConfigError(f"{source} line {number} is unusable: {reason}") from None
        if key.key_id in out:
            raise ExecutorConfigError(f"{source} line {number} lists key {key.key_id} again; keep one line per key")
        out[key.key_id] = key
    if not out:
        raise ExecutorConfigError(f"{source} holds no key; list the agent's key and the people who run commands "
                                  f"themselves, one a line: {KEY_LINE_FORMAT}")
    return out


class ExecutorSettings(BaseSettings):
    """The executor process's own settings (``BAMBOO_EXECUTOR_``)."""

    model_config = SettingsConfigDict(env_prefix="BAMBOO_EXECUTOR_", extra="ignore")

    verify_keys_file: Path | None = Field(default=None, description="trusted keys, one a line: 'agent IDENTITY "
                                                                     "BASE64KEY' or 'person IDENTITY BASE64KEY'")
    credential: str | None = Field(default=None, description="the one credential family this executor holds")
    gated_environments: str = Field(default="prod", description="comma-separated environments whose writes pass "
                                                                "the seven production write gates")
    ungated_environments: str = Field(default="staging", description="comma-separated environments whose writes "
                                                                     "need no grant, dry run or approval; an executor "
                                                                     "for an environment in neither list refuses to "
                                                                     "start")
    max_envelope_ttl_s: int = Field(default=DEFAULT_MAX_ENVELOPE_TTL_S, ge=10, le=3600)
    timeout_s: float = Field(default=120.0, gt=0)
    output_limit: int = Field(default=64 * 1024, ge=1024)


def load_executor_config(environment: str, channel: Channel, *, tools_file: Path, settings: ExecutorSettings,
                         approval_rules: ApprovalRules) -> ExecutorConfig:
    if settings.verify_keys_file is None:
        raise ExecutorConfigError("set BAMBOO_EXECUTOR_VERIFY_KEYS_FILE to the file of the keys this executor trusts "
                                  f"({KEY_LINE_FORMAT} a line)")
    try:
        text = settings.verify_keys_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ExecutorConfigError(f"cannot read verification keys {settings.verify_keys_file}: {why}") from None
    keys = parse_verification_keys(text, source=f"BAMBOO_EXECUTOR_VERIFY_KEYS_FILE ({settings.verify_keys_file})")
    commands = load_command_config(tools_file)
    held = settings.credential
    families: dict[str, CredentialFamily] = {}
    if held is not None:
        if held not in commands.credentials:
            raise ExecutorConfigError(f"credential family {held!r} is not declared in {tools_file}; declare it or "
                                      "fix BAMBOO_EXECUTOR_CREDENTIAL")
        families[held] = commands.credentials[held]
    gated, ungated = _names(settings.gated_environments), _names(settings.ungated_environments)
    if why := unclassified(environment, gated, ungated):
        raise ExecutorConfigError(why)
    return ExecutorConfig(
        environment=environment, channel=channel, policy=commands.policy, credentials=families, held_credential=held,
        verification_keys=keys, approval_rules=approval_rules, gated_environments=gated, ungated_environments=ungated,
        max_envelope_ttl_s=settings.max_envelope_ttl_s, timeout_s=settings.timeout_s,
        output_limit=settings.output_limit,
    )


def _names(listed: str) -> tuple[str, ...]:
    return tuple(e.strip() for e in listed.split(",") if e.strip())
