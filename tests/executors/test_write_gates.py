"""A production write missing each of the seven gates in turn is refused, naming the gate; with all seven it
runs exactly once, counted on the server (the PanDA simulator's record of kill calls; the bare repository's
branch for git)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from bamboo.audit import AuditEvent
from bamboo.executors.client import ExecRefused
from policy.approvers import ApprovalRules
from policy.signing import DEFAULT_DEPLOYMENT
from tests.executors.conftest import GIT_FAMILY, TASK, _git, command_policy, kill_target
from tests.panda.incidents import MEMORY_TASK


def assert_gate(err, number: int, name: str) -> None:
    assert err.type == f"gate.{name}", f"{err.type}: {err}"
    assert f"gate {number} ({name})" in str(err), str(err)


async def test_with_all_seven_gates_the_write_runs_exactly_once(harness):
    h = harness
    grant = await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    async with h.executor(h.config("prod", "rw")):
        result = await h.call("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert result.outcome.exit_code == 0, result.outcome.stderr
    assert '"success": true' in result.outcome.stdout.lower() or "'success': True" in result.outcome.stdout
    assert result.rule == "panda_task_kill" and result.grant_id == grant.grant_id
    assert h.kills_on_server() == 1
    assert await h.executions_used(grant.grant_id) == 1
    assert ("executor_ran", None) in await h.audit_kinds()


async def test_gate_1_no_explicit_write_rule(harness):
    h = harness
    await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    reads_only = command_policy(f"{h.simulator.host}:{h.simulator.port}", h.repos, with_write_rules=False)
    async with h.executor(h.config("prod", "rw", policy=reads_only)):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 1, "write_rule")
    assert h.kills_on_server() == 0


async def test_gate_1_a_read_rule_on_the_write_channel_is_not_a_write_rule(harness):
    """A kill declared (wrongly) as a read on rw matches, but only an explicit write rule lets it through."""
    h = harness
    policy = command_policy(f"{h.simulator.host}:{h.simulator.port}", h.repos)
    misdeclared = policy.model_copy(update={"rules": [
        r.model_copy(update={"access": "read"}) if r.name == "panda_task_kill" else r for r in policy.rules]})
    await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv(), policy=misdeclared)))
    async with h.executor(h.config("prod", "rw", policy=misdeclared)):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 1, "write_rule")
    assert "allows only reads" in str(err)
    assert h.kills_on_server() == 0


async def test_gate_2_no_write_credential_held(harness):
    h = harness
    await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    # this executor holds a production write family, with its values, but not the one the kill rule names
    async with h.executor(h.config("prod", "rw", credentials={"git_prod_rw": GIT_FAMILY}, held_credential="git_prod_rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 2, "write_credential")
    assert "this executor holds git_prod_rw" in str(err)
    assert h.kills_on_server() == 0


async def test_gate_2_write_credential_without_a_value(harness):
    h = harness
    await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    async with h.executor(h.config("prod", "rw"), source={"PATH": "/usr/bin:/bin"}):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 2, "write_credential")
    assert "has no value" in str(err)
    assert h.kills_on_server() == 0


async def test_gate_2_a_write_rule_without_a_credential(harness):
    """A write rule that names no credential would run with none: a production write needs its own."""
    h = harness
    policy = h.policy.model_copy(update={"rules": [
        r.model_copy(update={"credential": None}) if r.name == "panda_task_kill" else r for r in h.policy.rules]})
    await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv(), policy=policy)))
    async with h.executor(h.config("prod", "rw", policy=policy)):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 2, "write_credential")
    assert "names no write credential" in str(err)
    assert h.kills_on_server() == 0


async def test_gate_3_no_grant_for_the_exact_target_set(harness):
    h = harness
    await h.grant([kill_target(TASK), kill_target(MEMORY_TASK)])  # a superset is not this set
    await h.grant([kill_target(MEMORY_TASK)])  # another target
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 3, "capability_grant")
    assert h.kills_on_server() == 0


async def test_gate_3_a_revoked_grant_covers_nothing(harness):
    h = harness
    grant = await h.grant([kill_target()])
    assert await h.revoke(grant.grant_id)
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 3, "capability_grant")
    assert h.kills_on_server() == 0


async def test_gate_4_expired_grant(harness):
    h = harness
    await h.grant([kill_target()], ttl_s=-1)
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 4, "grant_capacity")
    assert "expired" in str(err)
    assert h.kills_on_server() == 0


async def test_gate_4_repetition_capacity_spent(harness):
    h = harness
    await h.grant([kill_target()], executions=2, repetitions=1)
    async with h.executor(h.config("prod", "rw")):
        first = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
        await h.call("prod", "rw", "panda_curl", h.kill_argv(), first)
        again = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))  # fresh envelope and approval
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), again)
    assert_gate(err, 4, "grant_capacity")
    assert "already ran 1" in str(err)
    assert h.kills_on_server() == 1


async def test_gate_4_the_last_execution_is_spent_once_under_a_race(harness):
    h = harness
    await h.grant([kill_target()], executions=1, repetitions=1)
    envelopes = [h.sign(h.approved(h.claims("prod", "rw", h.kill_argv()))) for _ in range(3)]
    async with h.executor(h.config("prod", "rw")):
        outcomes = await asyncio.gather(*(h.call("prod", "rw", "panda_curl", h.kill_argv(), e) for e in envelopes),
                                        return_exceptions=True)
    ran = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, ExecRefused)]
    assert len(ran) == 1 and len(refused) == 2, outcomes
    assert all(r.type == "gate.grant_capacity" for r in refused)
    assert h.kills_on_server() == 1


def _git_setup(h):
    clone = h.repos / "config"
    server = h.repos.parent / "server.git"
    return clone, server, ["git", "-C", str(clone), "push", "origin", "main"]


def _git_config(h):
    return h.config("prod", "rw", credentials={"git_prod_rw": GIT_FAMILY}, held_credential="git_prod_rw")


async def test_gate_5_a_failing_dry_run_refuses_and_nothing_is_pushed(harness, tmp_path):
    h = harness
    clone, server, argv = _git_setup(h)
    # Someone else pushed first: the operator's push is not a fast-forward, and the dry run says so.
    other = tmp_path / "other"
    _git("clone", str(server), str(other))
    (other / "site.yaml").write_text("site: SIM-SITE-B\n")
    _git("commit", "-am", "theirs", cwd=other)
    _git("push", "origin", "main", cwd=other)
    theirs = _git("rev-parse", "main", cwd=server).strip()
    (clone / "site.yaml").write_text("site: SIM-SITE-C\n")
    _git("commit", "-am", "ours", cwd=clone)
    await h.grant([f"git:{clone}"], rule="git_push", tool="config_git")
    envelope = h.sign(h.approved(h.claims("prod", "rw", argv, tool="config_git")))
    async with h.executor(_git_config(h)):
        err = await h.refusal("prod", "rw", "config_git", argv, envelope)
    assert_gate(err, 5, "dry_run")
    assert "rejected" in str(err) or "fetch first" in str(err), str(err)
    assert _git("rev-parse", "main", cwd=server).strip() == theirs


async def test_with_all_seven_gates_a_git_push_runs_after_its_dry_run(harness):
    h = harness
    clone, server, argv = _git_setup(h)
    (clone / "site.yaml").write_text("site: SIM-SITE-D\n")
    _git("commit", "-am", "fix the site", cwd=clone)
    ours = _git("rev-parse", "main", cwd=clone).strip()
    await h.grant([f"git:{clone}"], rule="git_push", tool="config_git")
    envelope = h.sign(h.approved(h.claims("prod", "rw", argv, tool="config_git")))
    async with h.executor(_git_config(h)):
        result = await h.call("prod", "rw", "config_git", argv, envelope)
    assert result.dry_run is not None and result.dry_run.exit_code == 0
    assert result.outcome.exit_code == 0, result.outcome.stderr
    assert _git("rev-parse", "main", cwd=server).strip() == ours


async def test_gate_6_no_approval(harness):
    h = harness
    await h.grant([kill_target()])
    envelope = h.sign(h.claims("prod", "rw", h.kill_argv()))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 6, "approval")
    assert h.kills_on_server() == 0


async def test_gate_6_an_unsigned_approval_even_where_reviews_need_no_signature(harness):
    """A deployment may accept unsigned review answers; a production write still needs a signed approval."""
    h = harness
    await h.grant([kill_target()])
    approved = h.approved(h.claims("prod", "rw", h.kill_argv()))
    unsigned = approved.model_copy(update={"approval": approved.approval.model_copy(update={"auth": None})})
    async with h.executor(h.config("prod", "rw", approval_rules=ApprovalRules(require_signatures=False))):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), h.sign(unsigned))
    assert_gate(err, 6, "approval")
    assert "unsigned" in str(err)
    assert h.kills_on_server() == 0


async def test_gate_6_a_signed_reject_is_not_an_approval(harness):
    from bamboo.executors import signer
    from policy.decisions import DecisionKind

    h = harness
    await h.grant([kill_target()])
    claims = h.claims("prod", "rw", h.kill_argv())
    rejected = claims.model_copy(update={"approval": signer.approve(claims, h.approver, kind=DecisionKind.REJECT, deployment=DEFAULT_DEPLOYMENT)})
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), h.sign(rejected))
    assert_gate(err, 6, "approval")
    assert "does not approve" in str(err)
    assert h.kills_on_server() == 0


async def test_gate_6_the_requester_cannot_approve_their_own_write(harness):
    h = harness
    await h.grant([kill_target()])
    claims = h.claims("prod", "rw", h.kill_argv())
    envelope = h.sign(h.approved(claims, h.requester))  # alice holds the role, but she asked for it
    # even where the deployment lets a requester approve their own reviewed code
    relaxed = ApprovalRules(require_distinct_approver=False)
    async with h.executor(h.config("prod", "rw", approval_rules=relaxed)):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 6, "approval")
    assert "approver_is_requester" in str(err)
    assert h.kills_on_server() == 0


async def test_gate_6_an_identity_without_the_approver_role(harness):
    h = harness
    await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv()), h.bystander))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 6, "approval")
    assert "approver_not_authorised" in str(err)


async def test_gate_6_an_approval_of_another_command(harness):
    h = harness
    await h.grant([kill_target()])
    other = h.approved(h.claims("prod", "rw", h.kill_argv(MEMORY_TASK)))
    claims = h.claims("prod", "rw", h.kill_argv()).model_copy(update={"approval": other.approval})
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), h.sign(claims))
    assert_gate(err, 6, "approval")
    assert h.kills_on_server() == 0


async def test_gate_6_an_approval_of_reviewed_code_is_not_an_approval_of_a_command(harness):
    """A requester edits her pending review to code whose text is the command's review subject (one line of JSON:
    a read-only dict expression, so its code hash equals the command's review hash) and an approver approves
    that harmless-looking code in her session. His signed decision on the code must not approve her production
    write under the session's id: code decisions and command approvals are different statements."""
    import json

    from policy.code_identity import code_hash
    from policy.decisions import DecisionKind, OperatorDecision
    from policy.envelopes import command_review_hash
    from policy.signing import StatementKind

    h = harness
    await h.grant([kill_target()])
    claims = h.claims("prod", "rw", h.kill_argv())
    subject = {"environment": claims.environment, "channel": claims.channel, "tool": claims.tool,
               "executable": claims.executable, "argv_digest": claims.argv_digest, "targets": list(claims.targets),
               "rule": claims.rule, "credential": claims.credential, "secrets": list(claims.secrets),
               "requester": claims.requester}
    code = json.dumps(subject, sort_keys=True, separators=(",", ":"))
    assert code_hash(code) == command_review_hash(claims)
    unsigned = OperatorDecision(turn=1, code_hash=code_hash(code), kind=DecisionKind.RUN_ONCE,
                                approver=h.approver.identity)
    on_the_code = unsigned.model_copy(update={"auth": h.approver.authorize(
        StatementKind.DECISION, claims.run_id, unsigned.signed_body(), ttl_s=600, deployment=DEFAULT_DEPLOYMENT)})
    envelope = h.sign(claims.model_copy(update={"approval": on_the_code}))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 6, "approval")
    assert h.kills_on_server() == 0


async def test_gate_6_an_approval_is_used_once(harness):
    h = harness
    await h.grant([kill_target()], executions=2, repetitions=2)
    approved = h.approved(h.claims("prod", "rw", h.kill_argv()))
    async with h.executor(h.config("prod", "rw")):
        await h.call("prod", "rw", "panda_curl", h.kill_argv(), h.sign(approved))
        # a new envelope (new nonce) around the same signed approval
        reused = approved.model_copy(update={"nonce": "ab" * 16})
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), h.sign(reused))
    assert_gate(err, 6, "approval")
    assert h.kills_on_server() == 1


async def test_gate_7_an_altered_envelope(harness):
    h = harness
    await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    altered = envelope.model_copy(update={"claims": envelope.claims.model_copy(update={"requester": "mallory"})})
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), altered)
    assert err.type == "envelope.bad_signature"
    assert "gate 7 (executor_signature)" in str(err)
    assert h.kills_on_server() == 0


async def test_a_write_never_runs_in_an_automatic_phase(harness):
    h = harness
    await h.grant([kill_target()])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv(), phase="automatic")))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert err.type == "phase.automatic_write"
    assert h.kills_on_server() == 0


async def test_a_read_sent_to_prod_rw_is_not_a_write(harness):
    """prod.rw runs only writes through the gates; a GET belongs on prod.ro."""
    h = harness
    argv = h.status_argv()
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", argv, h.sign(h.claims("prod", "ro", argv)))
    assert err.type == "envelope.wrong_channel"


def test_an_executor_serves_only_an_environment_named_gated_or_ungated(harness):
    """Gating by name alone failed open: an rw executor for `production` (not `prod`) ran a write with no grant,
    dry run or approval. An environment in neither list, or in both, is refused when the executor is configured."""
    import pydantic
    import pytest

    for environment, lists in (("production", {}), ("prod-eu", {}), ("prod", {"ungated_environments": ("prod",)})):
        with pytest.raises(pydantic.ValidationError, match="gated"):
            harness.config(environment, "rw", **lists)
    assert harness.config("prod-eu", "rw", gated_environments=("prod", "prod-eu")).environment == "prod-eu"


async def test_gate_6_an_approval_counts_for_its_requesters_request_only_and_is_not_spent_by_another(harness):
    """An approval is in the workflow's input, readable by any requester: attached to an envelope asking the same
    command for someone else it ran as theirs, and a refused attempt spent it, so its own request was refused."""
    h = harness
    await h.grant([kill_target()])
    alices = h.approved(h.claims("prod", "rw", h.kill_argv()))
    carols = h.claims("prod", "rw", h.kill_argv(), requester="carol").model_copy(  # the same run, its own envelope
        update={"run_id": alices.run_id, "approval": alices.approval})
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), h.sign(carols))
        assert_gate(err, 6, "approval")
        assert h.kills_on_server() == 0
        await h.call("prod", "rw", "panda_curl", h.kill_argv(), h.sign(alices))  # alice's request still runs
    assert h.kills_on_server() == 1


def test_gate_6_an_approval_signed_with_the_requests_own_key_is_refused(harness):
    """One key listed under one name in the executor's keys file and registered under another is one person."""
    from policy.approvers import DeploymentPolicy
    from policy.write_gates import approval_refusal

    h = harness
    claims = h.approved(h.claims("prod", "rw", h.kill_argv(), key=h.approver), h.approver)
    detail = approval_refusal(claims, DeploymentPolicy(), now=datetime.now(timezone.utc))
    assert detail is not None and "the key that signed the request" in detail


class _LosesRows:
    """An audit log that cannot write rows of the kinds named (a database blip, an executor killed meanwhile)."""

    def __init__(self, inner, kinds: set[str]) -> None:
        self.inner, self.kinds = inner, kinds

    async def append(self, event: AuditEvent, dedup_key=None):
        if event.kind in self.kinds:
            raise ConnectionError("server closed the connection unexpectedly")
        return await self.inner.append(event, dedup_key)


async def test_a_write_that_ran_is_never_reported_as_a_plain_failure_and_never_runs_unrecorded(harness):
    """The command ran, then its only row (executor_ran) could not be written: PanDA changed with no record, and the
    caller was told the call failed, so a second kill followed. A row now says it starts before it runs, and a row
    lost after the run is said to be one of a command that RAN."""
    h = harness
    await h.grant([kill_target()], executions=2, repetitions=2)  # the first, not run, still used one
    before = h.kills_on_server()
    async with h.executor(h.config("prod", "rw")) as impl:
        real = impl.audit
        impl.audit = _LosesRows(real, {"executor_started"})
        with pytest.raises(ExecRefused) as not_run:
            await h.call("prod", "rw", "panda_curl", h.kill_argv(), h.sign(h.approved(h.claims("prod", "rw", h.kill_argv()))))
        assert not_run.value.type == "audit.not_run" and h.kills_on_server() == before
        impl.audit = _LosesRows(real, {"executor_ran"})
        with pytest.raises(ExecRefused) as ran:
            await h.call("prod", "rw", "panda_curl", h.kill_argv(), h.sign(h.approved(h.claims("prod", "rw", h.kill_argv()))))
    assert ran.value.type == "audit.ran_unrecorded" and "RAN" in ran.value.message
    assert h.kills_on_server() == before + 1
    assert ("executor_started", None) in await h.audit_kinds()
