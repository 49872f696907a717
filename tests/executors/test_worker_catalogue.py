"""The worker's own catalogue holds the deployment's command tools: with BAMBOO_COMMAND_TOOLS_FILE,
BAMBOO_COMMAND_ENVIRONMENT and BAMBOO_COMMAND_AGENT set, generated code run by the worker's ``execute_code``
reads through an ``exec.staging.ro`` executor, under envelopes the worker's agent key signed; a kill is refused
before it is signed, and a half-configured worker refuses to start with a one-line error."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from bamboo.contract import Queue
from bamboo.investigation.code import with_task_preamble
from bamboo.sandbox.contract import ExecuteCodeInput
from bamboo.tools.model import ToolOrigin
from tests.executors.conftest import CURL, TASK
from tests.sandbox.conftest import needs_bwrap
from worker.registry import workflow_runner
from worker.services import build_services
from worker.wiring import CommandToolsConfigError, command_tools, investigation_activities
from workflows.exec_command import ExecCommand

TOOLS = """
[[tools]]
name = "panda_curl"
executable = "{curl}"
dialect = "curl"
description = "curl against the PanDA API"

[[rules]]
name = "panda_get_status"
tool = "panda_curl"
access = "read"
environments = ["staging"]
channel = "ro"
method = "GET"
allowed_hosts = ["{host}"]
url_paths = ['/api/v1/task/get_status']
options = [{{ name = "--silent", aliases = ["-s"] }}, {{ name = "--fail", aliases = ["-f"] }}]
positionals = [{{ name = "url", value = "url" }}]
targets = [{{ source = "query", field = "task_id", template = "panda:task:{{value}}", value_pattern = '[0-9]+' }}]
"""

CODE = """
out = {}
for label, argv in [('read', %r), ('kill', %r)]:
    try:
        out[label] = await tools.panda_curl(argv=argv)
    except Exception as exc:
        out[label] = {'error': str(exc)}
return out
"""


@pytest.fixture
def command_settings(settings, harness, tmp_path: Path):
    path = tmp_path / "tools.toml"
    path.write_text(TOOLS.format(curl=CURL, host=f"{harness.simulator.host}:{harness.simulator.port}"))
    return settings.model_copy(update={"command_tools_file": path, "command_environment": "staging",
                                       "command_agent": harness.agent.identity, "keys_dir": tmp_path / "keys"})


@needs_bwrap
async def test_generated_code_in_the_worker_reads_through_the_executor_and_cannot_kill(harness, command_settings):
    h = harness
    services = await build_services(command_settings, llm_base_url=command_settings.llm_base_url, pool_size=4)
    try:
        wiring = investigation_activities(services, h.client)
        sandbox = wiring.sandbox[0].__self__
        await sandbox.tools.refresh()
        [spec] = [s for s in sandbox.tools.list_tools() if s.name == "panda_curl"]
        assert spec.origin is ToolOrigin.COMMAND and spec.read_only
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=30))
        code = CODE % (h.status_argv(), h.kill_argv())
        # ExecCommand runs on the main queue, where the worker the tool caller belongs to serves it.
        async with h.executor(h.config("staging", "ro")), \
                Worker(h.client, task_queue=Queue.MAIN.value, workflows=[ExecCommand], workflow_runner=workflow_runner()):
            out = await env.run(sandbox.execute_code, ExecuteCodeInput(
                run_id="catalogue-test", code=with_task_preamble(code, TASK), allowed_tools=["panda_curl"],
                actor="automatic", timeout_s=60))
        await sandbox.tools.base.close()
    finally:
        await services.close()
    assert out.status == "ok", out.error
    read, kill = out.return_value["read"], out.return_value["kill"]
    assert read["exit_code"] == 0 and "running" in read["stdout"], read
    assert h.kills_on_server() == 0
    assert ("executor_ran", None) in await h.audit_kinds()
    assert [k for k, _ in await h.audit_kinds()].count("executor_ran") == 1
    assert "command refused" in kill["error"] and "--json" in kill["error"], kill  # refused before it was signed


@pytest.mark.parametrize("unset", ["command_tools_file", "command_environment", "command_agent"])
def test_a_half_configured_worker_names_what_is_missing(command_settings, harness, unset):
    half = command_settings.model_copy(update={unset: None})
    with pytest.raises(CommandToolsConfigError) as err:
        command_tools(half, harness.client)
    assert f"BAMBOO_{unset.upper()}" in str(err.value).split("set ", 1)[1] and "\n" not in str(err.value)


def test_without_command_settings_there_are_no_command_tools(settings, harness):
    assert command_tools(settings, harness.client) is None
