"""`bamboo populate --concurrency` means what it says (issue 25): asked above what the workers offer, the start
says what the batch gets and which setting limits it, read from the running worker's own configuration; and
the worker never makes more model calls at once than its setting, however many slices it runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import WorkflowHandle
from typer.testing import CliRunner

from bamboo.accumulation.contract import PopulateResult, batch_workflow_id
from bamboo.cli.concurrency_note import llm_offer
from bamboo.cli.main import app
from bamboo.worker_slots import Offer
from tests.integration.helpers import write_incidents

SLOTS = 4

def _write(tmp_path: Path, n: int) -> Path:
    return write_incidents(tmp_path / "incidents", n, prefix="conc", first_task=42000000)


async def test_concurrency_above_the_workers_slots_is_said_at_start_and_the_worker_holds_to_its_slots(
        settings, llm_server, client, tmp_path, monkeypatch):
    from worker.main import run_worker
    from worker.services import build_services

    narrow = settings.model_copy(update={"llm_concurrency": SLOTS})
    services = await build_services(narrow, llm_base_url=narrow.llm_base_url, pool_size=2)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(narrow, services=services, stop=stop))
    try:
        # The worker publishes its slots when it polls; wait for that poll (earlier tests' workers in this
        # process polled with other slots and count once, with their latest).
        while await llm_offer(client) != Offer(workers=1, slots=SLOTS):
            await asyncio.sleep(0.2)
        llm_server.latency_s = 0.2
        monkeypatch.setattr("bamboo.cli.populate_cmd.get_settings", lambda: narrow)
        out = await asyncio.to_thread(CliRunner().invoke, app, [
            "populate", str(_write(tmp_path, 40)), "--concurrency", "32", "--batch-id", "conc-32", "--detach"])
        assert out.exit_code == 0, out.output
        assert (f"concurrency 32 asked, the batch gets at most {SLOTS} model calls at once: limited by "
                "BAMBOO_LLM_CONCURRENCY") in " ".join(out.output.split()), out.output

        handle: WorkflowHandle = client.get_workflow_handle(batch_workflow_id("conc-32"), result_type=PopulateResult)
        result = await handle.result()
        assert (result.done, result.failed) == (40, 0), result.failures
        # Two slices of 20 on one worker: before, each was capped at the setting on its own (8 calls at once).
        assert llm_server.max_chats_in_flight <= SLOTS
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)
        await services.close()
