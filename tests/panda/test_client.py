from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import SecretStr

from bamboo.panda.client import PandaAuth, PandaClient
from bamboo.panda.errors import (
    LogHostNotAllowed,
    PandaApiError,
    PandaAuthError,
    PandaConfigError,
    PandaNotFound,
    PandaUnavailable,
)
from bamboo.panda.simulator import PandaSimulator
from bamboo.settings import Settings

from bamboo.panda.simulator.world import REFERENCE_OFFSET

from .incidents import BROKERAGE_TASK, MEMORY_TASK


async def test_task_details_come_from_the_incident(client: PandaClient) -> None:
    task = await client.get_task(MEMORY_TASK)
    assert task["status"] == "failed"
    assert task["ramCount"] == 2000


async def test_missing_task_is_not_found_not_empty(client: PandaClient) -> None:
    with pytest.raises(PandaNotFound) as info:
        await client.get_task(99999999)
    assert "99999999" in str(info.value)


async def test_jobs_logs_datasets_and_since(client: PandaClient) -> None:
    failed = await client.get_job_descriptions(MEMORY_TASK, unsuccessful_only=True)
    assert failed and all(j["jobStatus"] == "failed" for j in failed)
    log = await client.get_job_log(failed[0]["PandaID"])
    assert "OOM killer" in log
    datasets = await client.get_datasets_and_files(MEMORY_TASK)
    assert datasets[0]["dataset"]["name"] == "user.sim.memory.v1.input"
    # only the caller's own tasks unless the filters name the user; an ISO "T" is converted for the server
    assert await client.get_tasks_since("2026-11-09T00:00:00") == []
    recent = await client.get_tasks_since("2026-11-09T00:00:00", filters={"userName": "user-a"})
    ids = {t["jediTaskID"] for t in recent}
    assert MEMORY_TASK in ids and MEMORY_TASK + REFERENCE_OFFSET not in ids and BROKERAGE_TASK not in ids


async def test_unreachable_service_raises_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with PandaClient(f"http://127.0.0.1:{port}/api/v1", f"http://127.0.0.1:{port}", timeout_s=2) as c:
        with pytest.raises(PandaUnavailable):
            await c.get_task(MEMORY_TASK)


async def test_linked_log_outside_allowlist_is_refused_without_a_request(client: PandaClient) -> None:
    with pytest.raises(LogHostNotAllowed):
        await client.fetch_linked_log("https://evil.example.org/steal")
    with pytest.raises(LogHostNotAllowed):
        await client.fetch_linked_log("file:///etc/passwd")


async def test_oidc_token_is_sent_with_its_vo_and_required(incidents_dir: Path) -> None:
    with PandaSimulator(incidents_dir, require_token="s3cret") as sim:
        async with PandaClient(sim.api_url, sim.monitor_url) as anonymous:  # no certificate, no token
            with pytest.raises(PandaApiError, match="SSL secure connection is required"):
                await anonymous.get_task(MEMORY_TASK)
        settings = Settings(_env_file=None, panda_api_url=sim.api_url, panda_monitor_url=sim.monitor_url,
                            panda_auth="oidc", panda_oidc_token=SecretStr("s3cret"), panda_auth_vo="atlas")
        async with PandaClient.from_settings(settings) as authed:
            assert (await authed.get_task(MEMORY_TASK))["jediTaskID"] == MEMORY_TASK
        wrong_vo = settings.model_copy(update={"panda_auth_vo": "cms"})
        async with PandaClient.from_settings(wrong_vo) as refused:
            with pytest.raises(PandaAuthError, match="Unknown vo : cms") as info:
                await refused.get_task(MEMORY_TASK)
            assert info.value.status_code == 403 and "BAMBOO_PANDA_AUTH_VO" in str(info.value)


def test_auth_misconfiguration_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PandaConfigError, match="BAMBOO_PANDA_OIDC_TOKEN"):
        PandaClient("https://x/api/v1", "https://x", PandaAuth(mode="oidc"))
    with pytest.raises(PandaConfigError, match="BAMBOO_PANDA_AUTH_VO"):
        PandaClient("https://x/api/v1", "https://x", PandaAuth(mode="oidc", oidc_token=SecretStr("t")))
    with pytest.raises(PandaConfigError, match="BAMBOO_PANDA_X509_PROXY"):
        PandaClient("https://x/api/v1", "https://x", PandaAuth(mode="x509", x509_proxy=tmp_path / "nope"))
    garbage = tmp_path / "proxy.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(PandaConfigError, match="cannot load"):
        PandaClient("https://x/api/v1", "https://x", PandaAuth(mode="x509", x509_proxy=garbage))
