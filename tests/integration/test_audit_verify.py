"""`bamboo audit verify` finds rows modified, deleted, cut off the end or rewritten with recomputed
hashes; the table refuses UPDATE, DELETE and TRUNCATE (a trigger for everyone, grants for the app role).

Tampering is done the way an attacker with the owner's rights would: disable the append-only trigger
first. What the chain alone cannot see (a truncated table, a shorter chain, a recomputed one) the
signed checkpoint outside the database does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import psycopg
import pytest

from bamboo.audit import AuditEvent
from bamboo.store import open_store
from policy.audit_hash import GENESIS, row_hash
from tests.services import ROOT, worker_env

ATTACK = "ALTER TABLE audit DISABLE TRIGGER USER"


def _verify_cli(settings, checkpoint=None, *extra: str) -> subprocess.CompletedProcess:
    env = {**worker_env(settings), "COLUMNS": "300"}
    if checkpoint is not None:
        env.update(BAMBOO_AUDIT_CHECKPOINT_FILE=str(checkpoint.file), BAMBOO_AUDIT_SIGNING_KEY=str(checkpoint.key))
    return subprocess.run([sys.executable, "-m", "bamboo.cli.main", "audit", "verify", *extra], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)


async def _sql(url: str, *statements: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for statement in statements:
            await conn.execute(statement)


class _Checkpointed:
    def __init__(self, tmp_path) -> None:
        self.file = tmp_path / "keys" / "audit-checkpoint.json"
        self.key = tmp_path / "keys" / "audit-signing.key"


@pytest.fixture
def checkpoint(tmp_path):
    return _Checkpointed(tmp_path)


@pytest.fixture
async def signing_store(stack, database_url, llm_server, checkpoint):
    """The store as a worker opens it, from the worker's settings: it signs a checkpoint after every
    audit commit."""
    from worker.services import build_services

    settings = stack.settings(database_url, llm_server.base_url, audit_checkpoint_file=checkpoint.file,
                              audit_signing_key=checkpoint.key)
    worker_services = await build_services(settings, llm_base_url=llm_server.base_url, pool_size=2)
    yield worker_services.store
    await worker_services.close()


def _signed(checkpoint):
    from bamboo.store.audit_checkpoint import Checkpoint

    return Checkpoint.model_validate_json(checkpoint.file.read_text())


async def _append(store, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        await store.audit.append(AuditEvent(kind="decision", actor=f"op{i}", run_id="r", body={"n": i}))
    flush = getattr(store.audit, "flush_checkpoints", None)  # checkpoints are signed off the append's path
    if flush is not None:
        await flush()


async def test_verify_detects_a_modified_row(settings, services, database_url):
    await _append(services.store, 5)
    ok = _verify_cli(settings)
    assert ok.returncode == 0, ok.stderr
    assert "intact" in ok.stdout and "5 rows" in ok.stdout
    intact = json.loads(_verify_cli(settings, None, "--json").stdout)
    assert (intact["ok"], intact["rows"], intact["first_bad_seq"]) == (True, 5, None)

    await _sql(database_url, ATTACK, """UPDATE audit SET body = '{"n": 99}' WHERE seq = 3""")
    bad = _verify_cli(settings)
    assert bad.returncode == 1
    assert "broken at row 3" in bad.stderr and "modified" in bad.stderr
    assert "append-only trigger" in bad.stdout + bad.stderr and "disabled" in bad.stdout + bad.stderr

    as_json = _verify_cli(settings, None, "--json")  # for scripts: the same verdict and exit status, as data
    assert as_json.returncode == 1, as_json.stderr
    report = json.loads(as_json.stdout)
    assert (report["ok"], report["first_bad_seq"]) == (False, 3) and "modified" in report["reason"]


async def test_verify_detects_deleted_and_relinked_rows(services, database_url):
    await _append(services.store, 4)
    await _sql(database_url, ATTACK, "DELETE FROM audit WHERE seq = 2")
    report = await services.store.audit.verify()
    assert not report.ok and report.first_bad_seq == 3 and "missing" in report.reason


async def test_dedup_key_makes_retried_append_a_noop(services):
    e = AuditEvent(kind="graph_stored", body={"g": 1})
    assert await services.store.audit.append(e, dedup_key="x") == 1
    assert await services.store.audit.append(e, dedup_key="x") is None
    assert (await services.store.audit.verify()).rows == 1


@pytest.mark.parametrize("statement", [
    "UPDATE audit SET actor = 'someone else'", "DELETE FROM audit WHERE seq = 1", "TRUNCATE audit"])
async def test_the_table_refuses_rewrites_even_from_its_owner(services, database_url, statement):
    await _append(services.store, 2)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        await _sql(database_url, statement)
    assert (await services.store.audit.verify()).rows == 2


async def test_an_app_role_that_is_not_the_owner_cannot_rewrite_audit_at_all(stack, services):
    """Migrations run as the owner; the app's role may write the knowledge tables and append audit
    rows, but neither change them nor turn the trigger off — grants refuse it, whatever the trigger."""
    from bamboo.devstack.postgres import with_user

    owner_url = stack.new_database()
    role = f"bamboo_app_{uuid.uuid4().hex[:8]}"
    await _sql(owner_url, f'CREATE ROLE "{role}" LOGIN NOSUPERUSER')
    app_url = with_user(owner_url, role)
    store = await open_store(app_url, services.embedder.dim, services.embedder.model_id, max_size=2,
                             owner_url=owner_url)
    try:
        await _append(store, 3)
        await store.blobs.put(b"the app writes what it owns")
        for statement in ("UPDATE audit SET actor = 'x'", "DELETE FROM audit", "TRUNCATE audit",
                          "ALTER TABLE audit DISABLE TRIGGER USER", "DROP TRIGGER audit_append_only_rows ON audit",
                          "UPDATE store_meta SET value = 'x' WHERE key = 'audit_chain_id'"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await _sql(app_url, statement)
        report = await store.audit.verify()
        assert report.ok and report.rows == 3
        assert not any("only the append-only trigger" in w for w in report.warnings), report.warnings
    finally:
        await store.close()
    # The same check from the owner's side says what protects the table and what does not.
    owner = await open_store(owner_url, services.embedder.dim, services.embedder.model_id, max_size=1)
    try:
        assert any("only the append-only trigger" in w for w in (await owner.audit.verify()).warnings)
    finally:
        await owner.close()


async def test_truncate_is_detected_against_the_signed_checkpoint(signing_store, settings, database_url, checkpoint):
    await _append(signing_store, 10)
    ok = _verify_cli(settings, checkpoint)
    assert ok.returncode == 0, ok.stderr
    assert "10 rows" in ok.stdout and "checkpoint" in ok.stdout

    await _sql(database_url, ATTACK, "TRUNCATE audit")
    bad = _verify_cli(settings, checkpoint)
    assert bad.returncode == 1, bad.stdout
    assert "rows 1 to 10 are missing" in bad.stderr and "truncated" in bad.stderr


async def test_deleting_the_newest_rows_is_detected(signing_store, settings, database_url, checkpoint):
    await _append(signing_store, 10)
    await _sql(database_url, ATTACK, "DELETE FROM audit WHERE seq > 7")
    bad = _verify_cli(settings, checkpoint)
    assert bad.returncode == 1
    assert "rows 8 to 10 are missing" in bad.stderr


async def test_a_rewritten_chain_with_recomputed_hashes_is_detected(signing_store, settings, database_url, checkpoint):
    await _append(signing_store, 6)
    # The attacker changes row 2 and recomputes every hash after it: the chain itself holds.
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(ATTACK)
        rows = await (await conn.execute(
            "SELECT seq, at, actor, run_id, kind, body FROM audit ORDER BY seq")).fetchall()
        await conn.execute("DELETE FROM audit")
        prev = GENESIS
        for seq, at, actor, run_id, kind, body in rows:
            body = {"n": 1000} if seq == 2 else body
            at_text = at.isoformat()
            digest = row_hash(prev, seq, at_text, actor, run_id, kind, body)
            await conn.execute(
                "INSERT INTO audit (seq, at, actor, run_id, kind, body, prev_hash, hash) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                (seq, at, actor, run_id, kind, json.dumps(body), prev, digest))
            prev = digest
    bad = _verify_cli(settings, checkpoint)
    assert bad.returncode == 1
    assert "row 6 is not the row signed" in bad.stderr and "rewritten" in bad.stderr


async def test_a_worker_does_not_sign_over_a_cut_chain(signing_store, database_url, checkpoint):
    """After the newest rows are removed, new appends must not move the checkpoint past the gap: it
    stays as evidence, and verify keeps failing."""
    await _append(signing_store, 5)
    await _sql(database_url, ATTACK, "DELETE FROM audit WHERE seq > 2",
               "ALTER TABLE audit ENABLE TRIGGER USER")
    await _append(signing_store, 6, start=100)  # rows 3..8, a new tail
    kept = _signed(checkpoint)
    assert kept.seq == 5
    report = await signing_store.audit.verify()
    assert not report.ok and "row 5 is not the row signed" in report.reason


async def test_a_forged_or_foreign_checkpoint_fails_verification(signing_store, checkpoint, stack, services):
    await _append(signing_store, 3)
    signed = _signed(checkpoint)
    checkpoint.file.write_text(signed.model_copy(update={"seq": 1}).model_dump_json())  # signature kept
    report = await signing_store.audit.verify()
    assert not report.ok and "does not verify" in report.reason

    checkpoint.file.write_text(signed.model_dump_json())
    assert (await signing_store.audit.verify()).ok
    other = await open_store(stack.new_database(), services.embedder.dim, services.embedder.model_id, max_size=1,
                             checkpoints=signing_store.audit.checkpoints)
    try:
        report = await other.audit.verify()
        assert not report.ok and "belongs to audit chain" in report.reason
    finally:
        await other.close()


async def test_hostile_bytes_in_an_event_are_recorded_not_lost(services):
    """NUL and unpaired surrogates cannot live in jsonb: the event is recorded with them escaped."""
    seq = await services.store.audit.append(AuditEvent(kind="bridge_frame", body={"args": "a\x00b\ud800", "k\x00": 1}))
    [row] = await services.store.audit.tail(1)
    assert row["seq"] == seq and row["body"] == {"args": "a\\u0000b\\ud800", "k\\u0000": 1}
    assert (await services.store.audit.verify()).ok


async def test_two_workers_share_one_checkpoint_and_it_only_moves_forward(signing_store, stack, database_url,
                                                                         llm_server, checkpoint):
    """Each worker process signs the heads it commits; the file keeps the newest, whoever wrote it."""
    import asyncio

    from worker.services import build_services

    settings = stack.settings(database_url, llm_server.base_url, audit_checkpoint_file=checkpoint.file,
                              audit_signing_key=checkpoint.key)
    other = await build_services(settings, llm_base_url=llm_server.base_url, pool_size=2)
    try:
        await asyncio.gather(*(_append(store, 15, start=k * 100)
                               for k, store in enumerate([signing_store, other.store, signing_store])))
        await other.store.audit.flush_checkpoints()
        await signing_store.audit.flush_checkpoints()
        assert _signed(checkpoint).seq == 45
        report = await other.store.audit.verify()
        assert report.ok and report.rows == 45 and report.checkpoint_seq == 45, report
    finally:
        await other.close()


async def test_audit_tail_json_gives_every_row_in_full(settings, services):
    from bamboo.audit import AuditEvent

    long_body = {"note": "x" * 500, "session": "tail-json"}
    await services.store.audit.append(AuditEvent(kind="tail_json_probe", actor="tester", body=long_body))
    out = subprocess.run([sys.executable, "-m", "bamboo.cli.main", "audit", "tail", "--json", "--limit", "5"],
                         cwd=ROOT, env={**worker_env(settings), "COLUMNS": "80"}, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows[-1]["kind"] == "tail_json_probe" and rows[-1]["body"] == long_body  # nothing cut at 120 characters


async def test_audit_tail_shows_what_rows_quote_as_text(settings, services):
    """An audit row quotes what a session or a model said: `audit tail` printed it as rich markup, so a body
    holding [link=...] or [reverse] styled the operator's terminal instead of being read."""
    from bamboo.audit import AuditEvent

    said = "[link=https://evil.example]approved[/link] [reverse]by admin[/reverse]"
    await services.store.audit.append(AuditEvent(kind="tail_markup_probe", actor="model", body={"summary": said}))
    out = subprocess.run([sys.executable, "-m", "bamboo.cli.main", "audit", "tail", "--limit", "1"],
                         cwd=ROOT, env={**worker_env(settings), "COLUMNS": "300"}, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "[link=https://evil.example]approved[/link]" in out.stdout, out.stdout
    assert "[reverse]by admin[/reverse]" in out.stdout, out.stdout


def _audit_cli(settings, checkpoint, *args: str) -> subprocess.CompletedProcess:
    env = {**worker_env(settings), "COLUMNS": "300", "BAMBOO_AUDIT_CHECKPOINT_FILE": str(checkpoint.file),
           "BAMBOO_AUDIT_SIGNING_KEY": str(checkpoint.key)}
    return subprocess.run([sys.executable, "-m", "bamboo.cli.main", "audit", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


async def test_a_removed_checkpoint_is_never_a_fresh_start(signing_store, settings, database_url, checkpoint):
    """Issue 28, item 9: delete the checkpoint file, TRUNCATE audit as its owner, and verify said "intact:
    0 rows"; after one ordinary audited action, "intact: 1 rows; it reaches the signed checkpoint at row 1"."""
    await _append(signing_store, 10)
    checkpoint.file.unlink()
    await _sql(database_url, ATTACK, "TRUNCATE audit")
    bad = _verify_cli(settings, checkpoint)
    assert bad.returncode == 1, bad.stdout
    assert "no signed checkpoint" in bad.stderr and "checkpoints were started at" in bad.stderr

    await _append(signing_store, 1, start=50)  # an ordinary audited action afterwards
    assert not checkpoint.file.exists()  # the worker does not start a new checkpoint by itself
    bad = _verify_cli(settings, checkpoint)
    assert bad.returncode == 1 and "no signed checkpoint" in bad.stderr, bad.stdout + bad.stderr

    # only an operator's explicit, audited command starts a new one; afterwards the chain verifies again
    started = _audit_cli(settings, checkpoint, "checkpoint", "--start-new", "--reason", "truncation investigated",
                         "--as", "ops")
    assert started.returncode == 0, started.stdout + started.stderr
    ok = _verify_cli(settings, checkpoint)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    [row] = await signing_store.audit.tail(1)
    assert row["kind"] == "audit_checkpoint_started" and row["actor"] == "ops"
    assert row["body"]["reason"] == "truncation investigated"


async def test_a_chain_with_rows_and_no_checkpoint_fails_verification(signing_store, settings, checkpoint):
    await _append(signing_store, 3)
    checkpoint.file.unlink()
    bad = _verify_cli(settings, checkpoint)
    assert bad.returncode == 1 and "but this chain's checkpoints were started" in bad.stderr, bad.stderr
