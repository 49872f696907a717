from __future__ import annotations

import socket

import httpx

from bamboo.panda.client import PandaClient
from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.simulator.world import REFERENCE_OFFSET
from bamboo.panda.toolbox import PandaToolbox

from .incidents import BROKERAGE_TASK, DONE_TASK, MEMORY_TASK, PARENT_TASK, RUNNING_TASK


def test_catalogue_flags_and_explicit_task_id(toolbox: PandaToolbox) -> None:
    specs = {s.name: s for s in toolbox.list_tools()}
    assert {n for n, s in specs.items() if not s.read_only} == {"kill_task", "retry_task"}
    assert all(s.external_access for s in specs.values())
    for spec in specs.values():
        assert "task_id" in spec.input_schema["required"], spec.name


async def test_jobs_summary_reflects_the_error_dialog(toolbox: PandaToolbox) -> None:
    result = await toolbox.call_tool("get_task_jobs_summary", {"task_id": MEMORY_TASK})
    assert result.ok and not result.no_data
    assert result.data["total_jobs"] == 20
    assert result.data["status_counts"]["failed"] >= 1
    assert "memory limit" in result.data["top_errors"][0]["diag"]


async def test_scout_jobs_show_pss_above_the_request(toolbox: PandaToolbox) -> None:
    result = await toolbox.call_tool("get_scout_job_details", {"task_id": MEMORY_TASK, "max_jobs": 3})
    assert result.ok and 1 <= len(result.data) <= 3
    scout = result.data[0]
    assert scout["extendedProdSourceLabel"].endswith("scout")
    assert scout["maxPSS"] > 2000 * 1024


async def test_failed_log_summary_uses_incident_logs(toolbox: PandaToolbox) -> None:
    result = await toolbox.call_tool("get_failed_job_log_summary", {"task_id": MEMORY_TASK})
    assert result.ok
    assert any("bad_alloc" in line for line in result.data["summary"]["error_lines"])


async def test_no_failed_jobs_is_no_data_not_failure(toolbox: PandaToolbox) -> None:
    result = await toolbox.call_tool("get_failed_job_log_summary", {"task_id": DONE_TASK})
    assert result.ok and result.no_data


async def test_brokerage_failure_has_no_jobs(toolbox: PandaToolbox) -> None:
    result = await toolbox.call_tool("get_task_jobs_summary", {"task_id": BROKERAGE_TASK})
    assert result.ok and result.no_data


async def test_bad_arguments_fail_naming_the_argument(toolbox: PandaToolbox) -> None:
    wrong_type = await toolbox.call_tool("get_task_details", {"task_id": "abc"})
    assert not wrong_type.ok and "task_id" in wrong_type.error
    missing = await toolbox.call_tool("get_task_details", {})
    assert not missing.ok and "task_id" in missing.error and "required" in missing.error
    unknown = await toolbox.call_tool("get_task_details", {"task_id": MEMORY_TASK, "taskid": 1})
    assert not unknown.ok and "taskid" in unknown.error
    unknown_tool = await toolbox.call_tool("no_such_tool", {})
    assert not unknown_tool.ok and "unknown tool" in unknown_tool.error


async def test_missing_task_is_a_failure(toolbox: PandaToolbox) -> None:
    result = await toolbox.call_tool("get_task_details", {"task_id": 123})
    assert not result.ok and "not found" in result.error


async def test_retry_chain_follows_retry_id(toolbox: PandaToolbox) -> None:
    result = await toolbox.call_tool("get_retry_chain", {"task_id": MEMORY_TASK})
    assert [e["jediTaskID"] for e in result.data] == [MEMORY_TASK, PARENT_TASK]


async def test_similar_successful_task_and_log_comparison(toolbox: PandaToolbox) -> None:
    similar = await toolbox.call_tool("find_similar_successful_tasks", {"task_id": MEMORY_TASK})
    assert similar.ok
    reference = similar.data[0]["jediTaskID"]
    assert reference == MEMORY_TASK + REFERENCE_OFFSET
    compared = await toolbox.call_tool(
        "compare_failed_vs_successful_job_logs", {"task_id": MEMORY_TASK, "reference_task_id": reference}
    )
    assert compared.ok
    comparison = compared.data["comparison"]
    assert comparison["failed_log_truncated"] is True
    assert any("completed successfully" in line for line in comparison["successful_continuation"])


async def test_summarize_job_log_checks_job_belongs_to_task(toolbox: PandaToolbox) -> None:
    ok = await toolbox.call_tool("summarize_job_log", {"task_id": MEMORY_TASK, "panda_id": MEMORY_TASK * 1000 + 19})
    assert ok.ok and ok.data["summary"]["total_lines"] > 5
    other = await toolbox.call_tool("summarize_job_log", {"task_id": MEMORY_TASK, "panda_id": DONE_TASK * 1000})
    assert not other.ok and "not a job of task" in other.error


async def test_a_log_file_name_is_a_plain_ascii_name(toolbox: PandaToolbox) -> None:
    """The schema's "$" matched before a final line break, and "\\w" took any script's letters and digits."""
    job = MEMORY_TASK * 1000 + 19
    for name in ("payload.stdout\n", "..", ".", "log\u0663", "a/b", "-rf"):
        result = await toolbox.call_tool("summarize_job_log", {"task_id": MEMORY_TASK, "panda_id": job, "filename": name})
        assert not result.ok and "filename" in result.error, name


async def test_linked_logs_only_from_allowlisted_hosts(toolbox: PandaToolbox) -> None:
    result = await toolbox.call_tool("fetch_linked_log_files", {"task_id": BROKERAGE_TASK})
    assert result.ok
    assert len(result.data["logs"]) == 1
    assert "jediTaskID=41234600" in next(iter(result.data["logs"].values()))
    assert list(result.data["refused"]) == ["https://evil.example.org/steal"]


async def test_state_changing_calls_are_recorded(incidents_dir) -> None:
    with PandaSimulator(incidents_dir, production_role=True) as sim:  # kills user-a's tasks
        async with PandaClient(sim.api_url, sim.monitor_url) as client:
            toolbox = PandaToolbox(client)
            killed = await toolbox.call_tool("kill_task", {"task_id": RUNNING_TASK})
            assert killed.ok and killed.data["registered"] and killed.data["status"] == "running"
            assert "registered" in killed.data["message"] and not killed.data["applied"]
            refused = await toolbox.call_tool("kill_task", {"task_id": DONE_TASK})
            assert refused.error == ("kill_task: PanDA refused: Command rejected: the kill command is not accepted "
                                     "if the task is in done status")
            retried = await toolbox.call_tool("retry_task", {"task_id": MEMORY_TASK})
            assert retried.ok
            not_retried = await toolbox.call_tool("retry_task", {"task_id": BROKERAGE_TASK})
            assert not not_retried.ok and "in broken status" in not_retried.error
        record = httpx.get(f"{sim.base_url}/sim/calls").json()
    assert [(c["endpoint"], c["task_id"], c["accepted"]) for c in record] == [
        ("task/kill", RUNNING_TASK, True),
        ("task/kill", DONE_TASK, False),
        ("task/retry", MEMORY_TASK, True),
        ("task/retry", BROKERAGE_TASK, False),
    ]


async def test_a_kill_is_applied_later_and_wait_s_sees_it(incidents_dir) -> None:
    """JEDI's asynchrony: straight after the kill the task still runs; polling with a bound sees it abort."""
    with PandaSimulator(incidents_dir, jedi_delay_s=1.0, production_role=True) as sim:
        async with PandaClient(sim.api_url, sim.monitor_url) as client:
            toolbox = PandaToolbox(client)
            quick = await toolbox.call_tool("kill_task", {"task_id": RUNNING_TASK})
            assert quick.data["status"] == "running" and quick.data["applied"] is False
            assert await client.get_task_status(RUNNING_TASK) == "running"
            waited = await toolbox.call_tool("kill_task", {"task_id": RUNNING_TASK, "wait_s": 10})
            assert waited.ok and waited.data["applied"] and waited.data["status"] == "aborted"
            assert 0.5 < waited.data["waited_s"] < 10
            again = await toolbox.call_tool("kill_task", {"task_id": RUNNING_TASK})
            assert "in aborted status" in again.error


async def test_unreachable_panda_is_a_failure_not_no_data() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with PandaClient(f"http://127.0.0.1:{port}/api/v1", f"http://127.0.0.1:{port}", timeout_s=2) as client:
        result = await PandaToolbox(client).call_tool("get_task_jobs_summary", {"task_id": MEMORY_TASK})
    assert not result.ok and "unreachable" in result.error
