"""Chaos: Postgres stopped mid-batch for longer than the activity timeouts, then started again.

The batch must complete with every incident stored once and exactly one audit row per stored
incident, without handing incidents to workflows of their own (the slices wait the outage out,
heartbeating) and without asking the model about any incident twice.

Before the fix a 60 s outage failed the slices' store calls, spent their retries and re-ran most of
the batch one workflow per incident (212 audit rows for 200 incidents); a long one marked stored
incidents failed. This test runs its own Postgres so stopping it touches no other test.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from bamboo.devstack.postgres import start_postgres, stop_postgres
from bamboo.accumulation.contract import PopulateResult
from bamboo.samples import generate_incidents, write_incidents
from tests.integration.helpers import populate
from tests.support.answers import accumulation_handler
from tests.support.scripted_llm import ScriptedLLMServer
from bamboo.contract import HEARTBEAT

pytestmark = pytest.mark.slow

N = 48
# Longer than the slice's heartbeat timeout (10 s), a local activity's start-to-close (30 s) and the
# pool's wait for a connection (30 s): every one of them passes while the database is away.
OUTAGE_S = 40.0


@pytest.fixture
def own_postgres():
    base = Path(tempfile.mkdtemp(prefix="bamboo-chaos-"))
    pgdata = base / "pg"
    _, admin = start_postgres(pgdata)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "chaos"')
    yield pgdata, admin.replace("/bamboo?", "/chaos?")
    with contextlib.suppress(Exception):
        stop_postgres(pgdata)
    shutil.rmtree(base, ignore_errors=True)


def _start_again(pgdata: Path) -> str:
    """Start the server again from a fresh process, as `bamboo dev up` would after an outage."""
    started = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from bamboo.devstack.postgres import "
         "start_postgres; print(start_postgres(Path(sys.argv[1]))[1])", str(pgdata)],
        capture_output=True, text=True, timeout=120, check=True)
    return started.stdout.strip().splitlines()[-1]


async def _count(url: str, sql: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        return (await (await conn.execute(sql)).fetchone())[0]


async def test_a_postgres_outage_mid_batch_is_waited_out(stack, client, own_postgres, tmp_path):
    from worker.services import build_services
    from worker.main import run_worker

    assert OUTAGE_S > 3 * HEARTBEAT.total_seconds()
    pgdata, url = own_postgres
    incidents = generate_incidents(N, seed=11)
    write_incidents(incidents, tmp_path / "batch")
    with ScriptedLLMServer(accumulation_handler(), latency_s=0.15) as llm:
        settings = stack.settings(url, llm.base_url, llm_concurrency=8)
        services = await build_services(settings, llm_base_url=llm.base_url, pool_size=4)
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker(settings, services=services, stop=stop))
        try:
            handle = await populate(client, tmp_path / "batch", concurrency=8, every=1000, wait=False)
            for _ in range(600):
                stored = await _count(url, "SELECT count(*) FROM graphs")
                if stored >= 6:
                    break
                await asyncio.sleep(0.05)
            assert 0 < stored < N, "the outage must start mid-batch"

            await asyncio.to_thread(stop_postgres, pgdata)
            await asyncio.sleep(OUTAGE_S)
            again = await asyncio.to_thread(_start_again, pgdata)
            assert again.replace("/bamboo?", "/chaos?") == url

            result: PopulateResult = await asyncio.wait_for(handle.result(), 300)
            chats = llm.counts_by_schema()
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker, 30)
            await services.close()

    assert (result.done, result.failed) == (N, 0), result.failures
    assert await _count(url, "SELECT count(*) FROM graphs") == N
    assert await _count(url, "SELECT count(*) FROM (SELECT graph_id FROM edge_provenance GROUP BY graph_id) g") == N
    assert await _count(url, "SELECT count(DISTINCT body->>'graph_id') FROM audit WHERE kind = 'graph_stored'") == N
    assert await _count(url, "SELECT count(*) FROM audit WHERE kind = 'graph_stored'") == N, "one row per incident"
    assert result.escalated == 0, "the slices waited the outage out instead of handing incidents on"
    assert chats and all(n <= N for n in chats.values()), f"model calls by schema {chats}: some incidents twice"
