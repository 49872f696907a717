"""`bamboo audit verify` finds a row modified behind its back (and a deleted one)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bamboo.audit import AuditEvent
from tests.services import ROOT, worker_env

pytestmark = pytest.mark.integration


def _verify_cli(settings) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bamboo.cli.main", "audit", "verify"], cwd=ROOT,
                          env={**worker_env(settings), "COLUMNS": "200"}, capture_output=True, text=True, timeout=60)


async def test_verify_detects_tampering(settings, services):
    for i in range(5):
        await services.store.audit.append(AuditEvent(kind="decision", actor=f"op{i}", run_id="r", body={"n": i}))
    ok = _verify_cli(settings)
    assert ok.returncode == 0, ok.stderr
    assert "intact" in ok.stdout and "5 rows" in ok.stdout

    async with services.store.pool.connection() as conn:
        await conn.execute("""UPDATE audit SET body = '{"n": 99}' WHERE seq = 3""")
    bad = _verify_cli(settings)
    assert bad.returncode == 1
    assert "broken at row 3" in bad.stderr and "modified" in bad.stderr


async def test_verify_detects_deleted_and_relinked_rows(services):
    for i in range(4):
        await services.store.audit.append(AuditEvent(kind="k", body={"i": i}))
    async with services.store.pool.connection() as conn:
        await conn.execute("DELETE FROM audit WHERE seq = 2")
    report = await services.store.audit.verify()
    assert not report.ok and report.first_bad_seq == 3 and "missing" in report.reason


async def test_dedup_key_makes_retried_append_a_noop(services):
    e = AuditEvent(kind="graph_stored", body={"g": 1})
    assert await services.store.audit.append(e, dedup_key="x") == 1
    assert await services.store.audit.append(e, dedup_key="x") is None
    assert (await services.store.audit.verify()).rows == 1
