"""A capability grant counts only when a pinned administrator signed it, and is judged from what was signed.

Anyone with the app role can INSERT into ``capability_grants``; these tests do exactly that, the way such a
writer would, and the production kill is refused at gate 3 and never reaches the server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from bamboo.approvals.admin import sign_statement
from bamboo.executors import signer
from policy.capabilities import GrantTerms
from policy.signing import DEFAULT_DEPLOYMENT
from policy.trust_root import SignedStatement, StatementKind, TrustStatement
from tests.executors.conftest import TASK, kill_target
from tests.executors.test_write_gates import assert_gate
from tests.panda.incidents import MEMORY_TASK

GRANT_COLUMNS = ("grant_id", "environment", "tool", "rule", "targets", "max_executions", "max_repetitions",
                 "expires_at", "granted_by")


async def insert_row(h, signed: SignedStatement, **columns) -> str:
    """A grant row as a writer with the app role would INSERT it: columns from the statement's body unless
    ``columns`` says otherwise."""
    body = signed.statement.body
    values = {"grant_id": signed.statement.subject, **{c: body[c] for c in GRANT_COLUMNS[1:]}, **columns}
    async with h.pool.connection() as conn:
        await conn.execute(
            f"INSERT INTO capability_grants ({', '.join(GRANT_COLUMNS)}, statement, signature) "
            f"VALUES ({', '.join(['%s'] * len(GRANT_COLUMNS))}, %s, %s)",
            (*[values[c] for c in GRANT_COLUMNS], Jsonb(signed.statement.model_dump(mode="json")), signed.signature))
    return values["grant_id"]


def unsigned(h, targets: list[str]) -> SignedStatement:
    """A statement naming the pinned administrator as its signer, with no signature."""
    forged = h.signed_grant(targets)
    return forged.model_copy(update={"signature": ""})


def by_another_key(h, targets: list[str]) -> SignedStatement:
    return h.signed_grant(targets, admin=h.approver)  # bob's key: registered approver, not a pinned administrator


def granted_in_someone_elses_name(h, targets: list[str]) -> SignedStatement:
    terms = GrantTerms(environment="prod", tool="panda_curl", rule="panda_task_kill", targets=tuple(targets),
                       max_executions=1, max_repetitions=1, granted_by=h.approver.identity,
                       expires_at=datetime.now(UTC) + timedelta(hours=1))
    return sign_statement(h.admin, StatementKind.GRANT_CAPABILITY, "ab" * 8, terms, deployment=DEFAULT_DEPLOYMENT)


def body_rewritten(h, targets: list[str]) -> SignedStatement:
    """The administrator signed a grant on another task; its body then rewritten to this one."""
    signed = h.signed_grant([kill_target(MEMORY_TASK)])
    body = {**signed.statement.body, "targets": targets}
    return signed.model_copy(update={"statement": TrustStatement.model_validate(
        {**signed.statement.model_dump(), "body": body})})


def signed_for_staging(h, targets: list[str]) -> SignedStatement:
    """The same administrator's genuine grant in a staging deployment that pins the same key, copied here."""
    return signer.sign_grant(h.admin, environment="prod", tool="panda_curl", rule="panda_task_kill", targets=targets,
                             max_executions=1, max_repetitions=1, expires_at=datetime.now(UTC) + timedelta(hours=1),
                             deployment="staging")


FORGERIES = {"unsigned": unsigned, "signed by a key nobody pinned": by_another_key,
             "granted in someone else's name": granted_in_someone_elses_name,
             "signed body rewritten": body_rewritten, "signed for another deployment": signed_for_staging}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
async def test_a_grant_row_not_signed_by_a_pinned_administrator_counts_for_nothing(harness, forgery):
    h = harness
    await insert_row(h, FORGERIES[forgery](h, [kill_target()]))
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 3, "capability_grant")
    assert "signed by an administrator" in str(err) and "count for nothing" in str(err), str(err)
    assert h.kills_on_server() == 0


async def altered(h, grant_id: str, assignment: str, *values) -> None:
    """Change a stored grant's columns as the schema's owner can (the app role cannot: the rows are insert-only)."""
    async with h.pool.connection() as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(f"UPDATE capability_grants SET {assignment} WHERE grant_id = %s", (*values, grant_id))
    async with h.pool.connection() as conn:
        async with conn.transaction():
            await conn.execute("ALTER TABLE capability_grants DISABLE TRIGGER capability_grants_append_only_rows")
            await conn.execute(f"UPDATE capability_grants SET {assignment} WHERE grant_id = %s", (*values, grant_id))
            await conn.execute("ALTER TABLE capability_grants ENABLE TRIGGER capability_grants_append_only_rows")


async def test_a_grant_whose_targets_were_changed_after_signing_counts_for_nothing(harness):
    h = harness
    grant = await h.grant([kill_target(MEMORY_TASK)])
    await altered(h, grant.grant_id, "targets = %s", [kill_target(TASK)])
    envelope = h.sign(h.approved(h.claims("prod", "rw", h.kill_argv())))
    async with h.executor(h.config("prod", "rw")):
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(), envelope)
    assert_gate(err, 3, "capability_grant")
    assert "columns differ from its signed statement" in str(err), str(err)
    assert h.kills_on_server() == 0


async def test_a_grant_whose_executions_were_raised_after_signing_counts_for_nothing(harness):
    h = harness
    grant = await h.grant([kill_target()], executions=1, repetitions=1)
    async with h.executor(h.config("prod", "rw")):
        await h.call("prod", "rw", "panda_curl", h.kill_argv(), h.sign(h.approved(h.claims("prod", "rw",
                                                                                          h.kill_argv()))))
        await altered(h, grant.grant_id, "max_executions = %s, max_repetitions = %s", 5, 5)
        err = await h.refusal("prod", "rw", "panda_curl", h.kill_argv(),
                              h.sign(h.approved(h.claims("prod", "rw", h.kill_argv()))))
    assert_gate(err, 3, "capability_grant")
    assert h.kills_on_server() == 1


@pytest.mark.parametrize("table", ["capability_grants", "capability_grant_uses", "executor_nonces"])
async def test_grant_rows_their_uses_and_accepted_nonces_are_insert_only(harness, table):
    """A use deleted would refill a grant (the executions are counted from the uses); a nonce deleted would let
    the same signed envelope and approval run again."""
    h = harness
    await h.grant([kill_target()], executions=2, repetitions=2)
    async with h.executor(h.config("prod", "rw")):
        await h.call("prod", "rw", "panda_curl", h.kill_argv(), h.sign(h.approved(h.claims("prod", "rw",
                                                                                          h.kill_argv()))))
    async with h.pool.connection() as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(f"DELETE FROM {table}")


async def test_a_revocation_not_signed_by_a_pinned_administrator_revokes_nothing(harness):
    h = harness
    grant = await h.grant([kill_target()])
    forged = signer.sign_revocation(h.approver, grant.grant_id, deployment=DEFAULT_DEPLOYMENT)
    async with h.pool.connection() as conn:
        await conn.execute("INSERT INTO capability_grant_revocations (statement_id, grant_id, statement, signature) "
                           "VALUES (%s, %s, %s, %s)", (forged.statement.statement_id, grant.grant_id,
                                                       Jsonb(forged.statement.model_dump(mode="json")),
                                                       forged.signature))
    async with h.executor(h.config("prod", "rw")):
        result = await h.call("prod", "rw", "panda_curl", h.kill_argv(),
                              h.sign(h.approved(h.claims("prod", "rw", h.kill_argv()))))
    assert result.grant_id == grant.grant_id and h.kills_on_server() == 1
