"""The executor for prod.rw refuses envelopes that are not exactly for it, before anything runs.

Each refused call is checked on the PanDA simulator too: no kill reached the server.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bamboo.executors.contract import executor_queue
from tests.executors.conftest import SOURCE_ENV, TASK, kill_target
from tests.panda.incidents import MEMORY_TASK


async def _all_gates(h, argv):
    claims = h.approved(h.claims("prod", "rw", argv))
    await h.grant([kill_target()])
    return claims


async def test_a_read_on_staging_ro_runs_curl_against_the_api(harness):
    h = harness
    argv = h.status_argv()
    async with h.executor(h.config("staging", "ro")):
        result = await h.call("staging", "ro", "panda_curl", argv, h.sign(h.claims("staging", "ro", argv)))
    assert result.outcome.exit_code == 0, result.outcome.stderr
    assert "running" in result.outcome.stdout  # the task's status, as the API returned it
    assert result.access == "read" and result.targets == [f"panda:task:{TASK}"]
    assert ("executor_ran", None) in await h.audit_kinds()


async def test_prod_rw_refuses_a_staging_ro_envelope(harness):
    h = harness
    argv = h.status_argv()
    envelope = h.sign(h.claims("staging", "ro", argv))
    async with h.executor(h.config("prod", "rw")):
        # routed to exec.prod.rw although it was signed for staging.ro
        err = await h.refusal("prod", "rw", "panda_curl", argv, envelope)
    assert err.type == "envelope.wrong_environment"
    assert "gate 7 (executor_signature)" in str(err) and "exec.staging.ro" in str(err)
    assert executor_queue("prod", "rw") == "exec.prod.rw"


async def test_prod_rw_refuses_a_prod_ro_envelope(harness):
    h = harness
    argv = h.status_argv()
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", argv, h.sign(h.claims("prod", "ro", argv)))
    assert err.type == "envelope.wrong_channel"


async def test_a_tampered_argv_is_refused_by_its_digest(harness):
    h = harness
    claims = await _all_gates(h, h.kill_argv(TASK))
    envelope = h.sign(claims)
    other = h.kill_argv(MEMORY_TASK)  # allowed by the same rule, but not what was signed
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", other, envelope)
    assert err.type == "envelope.argv_mismatch", err
    assert h.kills_on_server(TASK) == 0 and h.kills_on_server(MEMORY_TASK) == 0


async def test_a_tampered_digest_claim_breaks_the_signature(harness):
    h = harness
    claims = await _all_gates(h, h.kill_argv())
    envelope = h.sign(claims)
    forged = envelope.model_copy(update={"claims": claims.model_copy(update={"argv_digest": "0" * 64})})
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), forged)
    assert err.type == "envelope.bad_signature"
    assert h.kills_on_server() == 0


async def test_an_expired_envelope_is_refused(harness):
    h = harness
    past = datetime.now(timezone.utc) - timedelta(minutes=10)
    claims = h.approved(h.claims("prod", "rw", h.kill_argv(), now=past, ttl_s=60))
    await h.grant([kill_target()])
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), h.sign(claims))
    assert err.type == "envelope.expired"
    assert h.kills_on_server() == 0


async def test_an_envelope_valid_for_too_long_is_refused(harness):
    h = harness
    argv = h.status_argv()
    async with h.executor(h.config("staging", "ro")):
        err = await h.refusal("staging", "ro", "panda_curl", argv, h.sign(h.claims("staging", "ro", argv, ttl_s=3600)))
    assert err.type == "envelope.expiry_too_far"


async def test_a_replayed_nonce_is_refused_and_the_write_ran_once(harness):
    h = harness
    claims = await _all_gates(h, h.kill_argv())
    await h.grant([kill_target()])  # capacity left: only the nonce can stop the replay
    envelope = h.sign(claims)
    async with h.executor(h.config("prod", "rw")):
        first = await h.call("prod", "rw", "panda_curl", h.kill_argv(), envelope)
        assert first.outcome.exit_code == 0, first.outcome.stderr
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert err.type == "envelope.replayed"
    assert h.kills_on_server() == 1


async def test_a_replayed_nonce_is_refused_by_another_executor_process_too(harness):
    """The nonce lives in Postgres, not in the executor's memory: a second executor refuses it as well."""
    h = harness
    argv = h.status_argv()
    envelope = h.sign(h.claims("staging", "ro", argv))
    async with h.executor(h.config("staging", "ro")):
        await h.call("staging", "ro", "panda_curl", argv, envelope)
    async with h.executor(h.config("staging", "ro")):
        err = await h.refusal("staging", "ro", "panda_curl", argv, envelope)
    assert err.type == "envelope.replayed"


async def test_an_unknown_key_is_refused(harness):
    h = harness
    claims = await _all_gates(h, h.kill_argv())
    # signed by an operator's key the executor does not hold as a verification key
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), h.sign(claims, h.bystander))
    assert err.type == "envelope.unknown_key"
    assert h.kills_on_server() == 0


async def test_every_refusal_is_audited(harness):
    h = harness
    argv = h.status_argv()
    async with h.executor(h.config("prod", "rw")):
        await h.refusal("prod", "rw", "panda_curl", argv, h.sign(h.claims("staging", "ro", argv)))
    assert ("executor_refused", "envelope.wrong_environment") in await h.audit_kinds()


async def test_a_git_read_on_prod_ro_runs_with_no_credential(harness):
    h = harness
    argv = ["git", "-C", str(h.repos / "config"), "log", "--oneline"]
    async with h.executor(h.config("prod", "ro")):
        result = await h.call("prod", "ro", "config_git", argv, h.sign(h.claims("prod", "ro", argv, tool="config_git")))
    assert result.outcome.exit_code == 0, result.outcome.stderr
    assert "first" in result.outcome.stdout
    assert result.grant_id is None and result.dry_run is None


async def test_a_rule_needing_a_credential_this_executor_does_not_hold_is_refused(harness):
    """An executor runs only with the one family it holds; a rule naming another is routed elsewhere."""
    h = harness
    policy = h.policy.model_copy(update={
        "credentials": {**h.policy.credentials, "panda_prod_ro": ["PANDA_AUTH_TOKEN"]},
        "rules": [r.model_copy(update={"credential": "panda_prod_ro"}) if r.name == "panda_get_status" else r
                  for r in h.policy.rules]})
    argv = h.status_argv()
    async with h.executor(h.config("prod", "ro", policy=policy)):
        err = await h.refusal("prod", "ro", "panda_curl", argv, h.sign(h.claims("prod", "ro", argv, policy=policy)))
    assert err.type == "credential.not_held"


async def test_the_same_envelope_sent_twice_at_once_runs_once(harness):
    """Two deliveries racing: the nonce's primary key lets exactly one through."""
    import asyncio

    from bamboo.executors.client import ExecRefused

    h = harness
    claims = await _all_gates(h, h.kill_argv())
    await h.grant([kill_target()])
    envelope = h.sign(claims)
    async with h.executor(h.config("prod", "rw")):
        outcomes = await asyncio.gather(*(h.call("prod", "rw", "panda_curl", h.kill_argv(), envelope)
                                          for _ in range(3)), return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, ExecRefused)]
    assert len(refused) == 2 and all(r.type == "envelope.replayed" for r in refused), outcomes
    assert h.kills_on_server() == 1


async def test_an_envelope_for_one_tool_does_not_run_another(harness):
    h = harness
    status = h.status_argv()
    envelope = h.sign(h.claims("prod", "ro", status))
    git_log = ["git", "-C", str(h.repos / "config"), "log", "--oneline"]
    async with h.executor(h.config("prod", "ro")):
        err = await h.refusal("prod", "ro", "config_git", git_log, envelope)
    assert err.type == "envelope.tool_mismatch"


async def test_a_secret_declaration_added_to_the_request_cannot_pick_another_rule(harness):
    """`{{secret:NAME}}` is outside the argv's digest: added to the unsigned request argv, it made the executor
    match another rule of the tool, with the credential family this executor holds, under an envelope signed for
    a rule without one. The envelope names its rule, family and secrets; the executor compares them."""
    from bamboo.commands.credentials import CredentialFamily

    h = harness
    power = next(r for r in h.policy.rules if r.name == "panda_get_status").model_copy(
        update={"name": "panda_get_status_power", "credential": "panda_power"})
    policy = h.policy.model_copy(update={"rules": [*h.policy.rules, power],
                                         "credentials": {**h.policy.credentials, "panda_power": ["PANDA_POWER_TOKEN"]}})
    family = CredentialFamily(name="panda_power", env={"PANDA_POWER_TOKEN": "EXEC_PANDA_POWER"})
    config = h.config("staging", "ro", policy=policy, credentials={"panda_power": family}, held_credential="panda_power")
    argv = h.status_argv()
    claims = h.claims("staging", "ro", argv, policy=policy)
    relayed = [argv[0], "{{secret:PANDA_POWER_TOKEN}}", *argv[1:]]
    async with h.executor(config, source={**SOURCE_ENV, "EXEC_PANDA_POWER": "panda-power-value"}):
        err = await h.refusal("staging", "ro", "panda_curl", relayed, h.sign(claims))
    assert err.type == "envelope.rule_mismatch", err
    assert "panda_get_status_power" in str(err)
    assert claims.rule == "panda_get_status" and claims.credential is None
