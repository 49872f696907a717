"""Decision envelopes: what the agent side signs so a remote executor runs exactly one approved command.

An executor runs commands with infrastructure credentials the agent never holds, so it must not trust the
request it is handed. The agent side signs a short-lived Ed25519 envelope naming the run and tool call, the
environment and channel it is meant for, the executable, the digest of the exact argv, the target set, the
rule with its credential family and declared secrets, the phase it was produced in, an expiry, a nonce and
the key id; a production write also carries the signed operator decision that approved it. The executor
verifies the signature against its own configured keys and asserts every claim against its fixed environment
and channel and the request before anything runs.

Every configured key names whose it is and what kind (``VerificationKey``), because the claims a key may make
differ. The agent's key signs for generated code in a session whose requester the worker knows, so it may
name any requester and claims ``automatic`` or ``interactive``. A person's key signs only what that person
runs by hand: the requester must be that person (else anyone holding a trusted key could ask "for" someone
else, and approve it themselves), and the phase is ``operator``, never a phase of generated code.

Verification here is pure. Replay protection needs durable state: the executor records every nonce in
Postgres (``bamboo.store.executor_state``) after the signature checks out, so a replayed envelope is refused
even by another executor process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from policy.decisions import OperatorDecision
from policy.identity import Identity
from policy.signing import DEPLOYMENT_PATTERN, NONCE_PATTERN, IdentityKey, signature_valid, utc_expiry

DOMAIN = b"bamboo-decision-envelope-v1\n"
DEFAULT_MAX_ENVELOPE_TTL_S = 5 * 60
NAME_PATTERN = r"^[a-z][a-z0-9-]{0,31}$"
DIGEST_PATTERN = r"^[0-9a-f]{64}$"

Channel = Literal["ro", "rw"]
# automatic / interactive: generated code in a session (agent key only); operator: a person running a
# command directly with their own key (`bamboo exec run`).
EnvelopePhase = Literal["automatic", "interactive", "operator"]
KeyKind = Literal["agent", "person"]
AGENT_PHASES: frozenset[str] = frozenset({"automatic", "interactive"})
PERSON_PHASES: frozenset[str] = frozenset({"operator"})


class VerificationKey(IdentityKey):
    """One key an executor trusts: whose it is, and whether it is the agent's or a person's."""

    kind: KeyKind


class EnvelopeClaims(BaseModel):
    """Everything the signature covers. ``argv_digest`` is ``policy.commands.argv_digest`` of the normalised
    argv the executor will run; ``targets`` is the canonical target set the policy extracted from it; ``rule``,
    ``credential`` and ``secrets`` are the winning rule, its credential family and the sorted names declared
    with ``{{secret:NAME}}``, which the normalised argv does not carry (a declaration is taken out of it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str = Field(min_length=1, max_length=200)
    tool_call_id: str = Field(min_length=1, max_length=200)
    # The deployment whose executors may run it (the name its pinned trust root gives it): one key trusted by two
    # deployments' executors, an envelope copied from one's workflow history ran again on the other's, whose
    # nonces had never seen it.
    deployment: str = Field(pattern=DEPLOYMENT_PATTERN)
    environment: str = Field(pattern=NAME_PATTERN)
    channel: Channel
    phase: EnvelopePhase
    tool: str = Field(min_length=1, max_length=100)
    executable: str = Field(min_length=1, max_length=4096)
    argv_digest: str = Field(pattern=DIGEST_PATTERN)
    targets: tuple[str, ...] = ()
    # The argv's digest alone left these open: `{{secret:NAME}}` is removed before the digest is taken, so adding
    # one to the unsigned request argv picked another rule of the tool, with another credential family, under
    # an envelope signed for the first.
    rule: str = Field(min_length=1, max_length=200)
    credential: str | None = Field(default=None, max_length=200)
    secrets: tuple[str, ...] = ()
    requester: Identity
    expires_at: datetime
    nonce: str = Field(pattern=NONCE_PATTERN)
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    # The operator's signed decision approving this command (gate 6 of a production write).
    approval: OperatorDecision | None = None

    @field_validator("expires_at")
    @classmethod
    def _aware_whole_seconds(cls, value: datetime) -> datetime:
        return utc_expiry(value).replace(microsecond=0)

    @field_validator("targets", "secrets")
    @classmethod
    def _sorted_unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(value)))


class DecisionEnvelope(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    claims: EnvelopeClaims
    signature: str = Field(max_length=128)


def envelope_bytes(claims: EnvelopeClaims) -> bytes:
    """The exact bytes signed: a domain tag (so no other signed statement can pass for an envelope), then
    canonical JSON of the claims (sorted keys, no spaces, ASCII, expiry as epoch seconds)."""
    payload = claims.model_dump(mode="json")
    payload["expires_at"] = int(claims.expires_at.timestamp())
    return DOMAIN + json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


class EnvelopeRefusal(str, Enum):
    UNKNOWN_KEY = "unknown_key"
    BAD_SIGNATURE = "bad_signature"
    REQUESTER_NOT_SIGNER = "requester_not_signer"
    PHASE_NOT_FOR_KEY = "phase_not_for_key"
    EXPIRED = "expired"
    EXPIRY_TOO_FAR = "expiry_too_far"
    WRONG_DEPLOYMENT = "wrong_deployment"
    WRONG_ENVIRONMENT = "wrong_environment"
    WRONG_CHANNEL = "wrong_channel"
    TOOL_MISMATCH = "tool_mismatch"
    ARGV_MISMATCH = "argv_mismatch"
    EXECUTABLE_MISMATCH = "executable_mismatch"
    TARGET_MISMATCH = "target_mismatch"
    RULE_MISMATCH = "rule_mismatch"
    CREDENTIAL_MISMATCH = "credential_mismatch"
    REPLAYED = "replayed"


class EnvelopeVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    refusal: EnvelopeRefusal | None = None
    detail: str = ""

    @classmethod
    def refuse(cls, refusal: EnvelopeRefusal, detail: str) -> "EnvelopeVerdict":
        return cls(ok=False, refusal=refusal, detail=detail)


def signature_matches(public_key: str, claims: EnvelopeClaims, signature: str) -> bool:
    return signature_valid(public_key, envelope_bytes(claims), signature)


def key_refusal(claims: EnvelopeClaims, key: VerificationKey) -> EnvelopeVerdict | None:
    """What the signing key may not claim: a person's key only its own requests in phase ``operator``; the
    agent's key any requester, in phase ``automatic`` or ``interactive``."""
    if key.kind == "person":
        if claims.requester != key.identity:
            return EnvelopeVerdict.refuse(
                EnvelopeRefusal.REQUESTER_NOT_SIGNER,
                f"{key.identity}'s person key signed an envelope claiming requester {claims.requester!r}; a "
                f"person's key signs only their own requests: sign with requester {key.identity}")
        if claims.phase not in PERSON_PHASES:
            return EnvelopeVerdict.refuse(
                EnvelopeRefusal.PHASE_NOT_FOR_KEY,
                f"{key.identity}'s person key may not claim phase {claims.phase!r}, which is for generated code "
                "that only the agent's key signs; a command you run yourself claims phase 'operator' "
                "(`bamboo exec run`)")
    elif claims.phase not in AGENT_PHASES:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.PHASE_NOT_FOR_KEY,
            f"the agent key of {key.identity} may not claim phase {claims.phase!r}, which is for a person running "
            "a command with their own key; the agent signs phase 'automatic' or 'interactive'")
    return None


def verify_envelope(
    envelope: DecisionEnvelope,
    *,
    keys: Mapping[str, VerificationKey],
    deployment: str,
    environment: str,
    channel: str,
    now: datetime,
    max_ttl_s: int = DEFAULT_MAX_ENVELOPE_TTL_S,
) -> EnvelopeVerdict:
    """The signature, what its key may claim, its freshness and the executor-fixed claims (deployment,
    environment, channel).

    ``keys`` maps key id to the executor's configured verification keys, never a key the request names.
    Claims about the command itself are compared with ``verify_request`` once the executor has evaluated the
    argv it received.
    """
    claims = envelope.claims
    key = keys.get(claims.key_id)
    if key is None:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.UNKNOWN_KEY,
            f"envelope signed by key {claims.key_id}, which this executor does not trust; sign with a configured "
            "key or add this one to the executor's verification keys as an 'agent' or 'person' line")
    if not signature_matches(key.public_key, claims, envelope.signature):
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.BAD_SIGNATURE,
            f"the envelope's signature does not match key {claims.key_id} for these claims; it was altered or "
            "signed for something else")
    refused = key_refusal(claims, key)
    if refused is not None:
        return refused
    if claims.expires_at <= now:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.EXPIRED, f"the envelope expired at {claims.expires_at.isoformat()}; sign a new one")
    if claims.expires_at > now + timedelta(seconds=max_ttl_s):
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.EXPIRY_TOO_FAR,
            f"the envelope is valid for more than {max_ttl_s} s; sign it with a shorter expiry")
    if claims.deployment != deployment:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.WRONG_DEPLOYMENT,
            f"the envelope is for deployment {claims.deployment!r}, this executor serves {deployment!r}; sign it "
            "with the deployment's name (the signer's BAMBOO_DEPLOYMENT)")
    if claims.environment != environment:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.WRONG_ENVIRONMENT,
            f"the envelope is for environment {claims.environment!r}, this executor serves {environment!r}; "
            f"send it to exec.{claims.environment}.{claims.channel}")
    if claims.channel != channel:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.WRONG_CHANNEL,
            f"the envelope is for channel {claims.channel!r}, this executor serves {channel!r}; "
            f"send it to exec.{claims.environment}.{claims.channel}")
    return EnvelopeVerdict(ok=True)


def verify_request(
    claims: EnvelopeClaims, *, tool: str, executable: str, argv_digest: str, targets: list[str] | tuple[str, ...],
    rule: str, credential: str | None, secrets: list[str] | tuple[str, ...],
) -> EnvelopeVerdict:
    """The command claims against what the executor itself derived from the request it will run: the tool, the
    argv's digest, the executable, the targets, and the rule that matched with its credential family and the
    secrets the request declared."""
    if claims.tool != tool:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.TOOL_MISMATCH, f"the envelope approves tool {claims.tool!r}, the request asks for {tool!r}")
    if claims.argv_digest != argv_digest:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.ARGV_MISMATCH,
            "the argv this executor would run does not match the envelope's argv digest; sign the exact command")
    if claims.executable != executable:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.EXECUTABLE_MISMATCH,
            f"the envelope names executable {claims.executable!r}, this executor resolves {executable!r}")
    if tuple(sorted(set(targets))) != claims.targets:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.TARGET_MISMATCH,
            f"the envelope names targets {list(claims.targets)}, the command acts on {sorted(set(targets))}")
    if claims.rule != rule:
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.RULE_MISMATCH,
            f"the envelope approves rule {claims.rule!r}, the request matches rule {rule!r}; sign the exact command "
            "with its {{secret:NAME}} declarations")
    if claims.credential != credential or claims.secrets != tuple(sorted(set(secrets))):
        return EnvelopeVerdict.refuse(
            EnvelopeRefusal.CREDENTIAL_MISMATCH,
            f"the envelope names credential {claims.credential!r} with secrets {list(claims.secrets)}, the request "
            f"runs with {credential!r} and {sorted(set(secrets))}; sign the exact command")
    return EnvelopeVerdict(ok=True)


def command_review_hash(claims: EnvelopeClaims) -> str:
    """What an operator's decision on a command names as its ``code_hash``: a SHA-256 over the environment,
    channel, tool, executable, argv digest, targets, rule, credential family, declared secrets and requester, so
    a signed approval covers exactly one normalised command line under one rule and credential in one environment
    asked for by one person, and cannot be carried over to another (without the requester, anyone holding a
    trusted key attached an approval of someone else's command, copied from the workflow's input, to an envelope
    of their own: the write ran as theirs)."""
    subject = {"environment": claims.environment, "channel": claims.channel, "tool": claims.tool,
               "executable": claims.executable, "argv_digest": claims.argv_digest, "targets": list(claims.targets),
               "rule": claims.rule, "credential": claims.credential, "secrets": list(claims.secrets),
               "requester": claims.requester}
    canonical = json.dumps(subject, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()
