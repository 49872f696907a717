"""The deployed shape: `python -m worker.executor` processes on their own queues, configured from a
command-tools file, the keys they trust (each naming its person or the agent) and the administrators the
deployment pins, and `bamboo exec run / approve / grant` signing with operators' and administrators' keys on
disk."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

import pytest
from temporalio.worker import Worker

from bamboo.approvals.keys import KeyStore
from tests.executors.conftest import CURL, TASK
from tests.services import ROOT
from worker.registry import workflow_runner
from workflows.exec_command import ExecCommand

TOOLS_TOML = """
[[tools]]
name = "panda_curl"
executable = "{curl}"
dialect = "curl"
description = "curl against the PanDA API"

[credentials.panda_prod_rw]
env = {{ PANDA_AUTH_TOKEN = "EXEC_PANDA_PROD_RW_TOKEN" }}

[[rules]]
name = "panda_get_status"
tool = "panda_curl"
access = "read"
environments = ["staging", "prod"]
channel = "ro"
method = "GET"
options = [{{ name = "--silent", aliases = ["-s"] }}]
positionals = [{{ name = "url", value = "url" }}]
allowed_hosts = ["{host}"]
url_paths = ["/api/v1/task/get_status"]
targets = [{{ source = "query", field = "task_id", template = "panda:task:{{value}}", value_pattern = "[0-9]+" }}]

[[rules]]
name = "panda_task_kill"
tool = "panda_curl"
access = "write"
environments = ["prod"]
channel = "rw"
credential = "panda_prod_rw"
method = "POST"
options = [{{ name = "--silent", aliases = ["-s"] }}, {{ name = "--json", value = "json" }}]
positionals = [{{ name = "url", value = "url" }}]
allowed_hosts = ["{host}"]
url_paths = ["/api/v1/task/kill"]
targets = [{{ source = "json", field = "task_id", template = "panda:task:{{value}}", value_pattern = "[0-9]+" }}]
"""


@pytest.fixture
def deployment(harness, stack, database_url, llm_server, tmp_path: Path) -> dict[str, str]:
    h = harness
    tools = tmp_path / "command-tools.toml"
    tools.write_text(TOOLS_TOML.format(curl=CURL, host=f"{h.simulator.host}:{h.simulator.port}"))
    keys_dir = tmp_path / "keys"  # admin, alice, bob, carol and agent, created by the harness
    verify = tmp_path / "executor-verify.keys"
    # the CLI signs envelopes with the caller's (alice's) key, as her own request
    verify.write_text(f"agent {h.agent.identity} {h.agent.public_key}\nperson alice {h.requester.public_key}\n")
    admins = tmp_path / "admin-keys"
    admins.write_text(f"{h.admin.identity} {h.admin.public_key}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAMBOO_")}
    env.update({
        "BAMBOO_TEMPORAL_ADDRESS": stack.temporal_address, "BAMBOO_DATABASE_URL": database_url,
        "BAMBOO_EMBEDDING_MODEL": "scripted-embedding", "BAMBOO_EMBEDDING_BASE_URL": llm_server.base_url,
        "BAMBOO_COMMAND_TOOLS_FILE": str(tools),
        "BAMBOO_EXECUTOR_VERIFY_KEYS_FILE": str(verify), "BAMBOO_KEYS_DIR": str(keys_dir),
        "BAMBOO_ADMIN_KEYS_FILE": str(admins), "BAMBOO_DEPLOYMENT": "default",
        "PYTHONPATH": str(ROOT),
    })
    return env


@contextlib.asynccontextmanager
async def executor_process(env: dict[str, str], environment: str, channel: str, log: Path, **extra: str):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "worker.executor", "--environment", environment, "--channel", channel, cwd=ROOT,
        env={**env, **extra}, stdout=open(log, "ab"), stderr=asyncio.subprocess.STDOUT)
    try:
        for _ in range(300):
            if "executor polling" in log.read_text():
                break
            if proc.returncode is not None:
                raise AssertionError(f"executor exited: {log.read_text()[-2000:]}")
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"executor did not start: {log.read_text()[-2000:]}")
        yield proc
    finally:
        proc.terminate()
        await proc.wait()


async def bamboo(env: dict[str, str], *args: str, operator: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from bamboo.cli.main import main; main()", *args, cwd=ROOT,
        env={**env, "BAMBOO_OPERATOR": operator}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def main_queue(h):
    async with Worker(h.client, task_queue="bamboo", workflows=[ExecCommand], workflow_runner=workflow_runner()):
        yield


async def test_exec_run_reads_through_a_staging_ro_executor_process(harness, deployment, tmp_path):
    h = harness
    async with main_queue(h), executor_process(deployment, "staging", "ro", tmp_path / "ro.log"):
        code, out, err = await bamboo(deployment, "exec", "run", "--environment", "staging", "--channel", "ro",
                                      "panda_curl", "--", *h.status_argv()[:1], "-s", h.status_argv()[-1],
                                      operator="alice")
    assert code == 0, err
    assert "running" in out


async def test_a_production_write_through_the_cli_runs_once_with_grant_and_approval(harness, deployment, tmp_path):
    h = harness
    argv = ["curl", "-s", "--json", f'{{"task_id":{TASK}}}', h.url("/task/kill")]
    run = ["--environment", "prod", "--channel", "rw", "--run", "cli-run-1"]
    async with main_queue(h), executor_process(deployment, "prod", "rw", tmp_path / "rw.log",
                                               BAMBOO_EXECUTOR_CREDENTIAL="panda_prod_rw",
                                               EXEC_PANDA_PROD_RW_TOKEN="prod-token-value"):
        # without approval or grant: refused at the first missing gate, nothing reaches the server
        code, _, err = await bamboo(deployment, "exec", "run", *run, "panda_curl", "--", *argv, operator="alice")
        assert code == 1 and "gate 3 (capability_grant)" in err, err
        target = f"panda:task:{TASK}"
        code, out, err = await bamboo(deployment, "exec", "grant", "--environment", "prod", "--tool", "panda_curl",
                                      "--rule", "panda_task_kill", "--target", target, "--admin", "admin",
                                      operator="bob")
        assert code == 0, err
        code, approval, err = await bamboo(deployment, "exec", "approve", *run, "--requester", "alice", "panda_curl",
                                           "--", *argv, operator="bob")
        assert code == 0, err
        # the approver reads the command as the executor runs it, not only as typed: the policy's normal form
        runs = next(line for line in err.splitlines() if line.startswith("the executor runs: "))
        assert "--disable" in runs and h.url("/task/kill") in runs and f"task_id\":{TASK}" in runs, runs
        (tmp_path / "approval.json").write_text(approval)
        code, out, err = await bamboo(deployment, "exec", "run", *run, "--approval", str(tmp_path / "approval.json"),
                                      "panda_curl", "--", *argv, operator="alice")
        assert code == 0, err
        again = await bamboo(deployment, "exec", "run", *run, "--approval", str(tmp_path / "approval.json"),
                             "panda_curl", "--", *argv, operator="alice")
    assert again[0] == 1 and "production write refused at gate" in again[2], again  # its grant spent, or its approval
    assert h.kills_on_server() == 1


async def test_exec_grant_and_revoke_give_their_verdicts_as_json_for_scripts(harness, deployment):
    """A script reads the grant's id from `--json` instead of parsing a sentence, and a refused revoke is a
    JSON verdict with the one-line reason and exit status 1, as `bamboo approve --json` gives it."""
    import json

    target = f"panda:task:{TASK}"
    code, out, err = await bamboo(deployment, "exec", "grant", "--environment", "prod", "--tool", "panda_curl",
                                  "--rule", "panda_task_kill", "--target", target, "--admin", "admin", "--json",
                                  operator="bob")
    assert code == 0, err
    granted = json.loads(out)
    assert granted["accepted"] is True and granted["targets"] == [target] and granted["signed_by"] == "admin"
    code, out, err = await bamboo(deployment, "exec", "revoke", granted["grant_id"], "--admin", "admin", "--json",
                                  operator="bob")
    assert code == 0, err
    assert json.loads(out) == {"accepted": True, "grant_id": granted["grant_id"], "revoked_by": "admin"}
    code, out, err = await bamboo(deployment, "exec", "revoke", granted["grant_id"], "--admin", "admin", "--json",
                                  operator="bob")
    refused = json.loads(out)
    assert code == 1 and refused["accepted"] is False and "no active grant" in refused["refusal"], (out, err)


@pytest.mark.parametrize("admin", ["bob", None, "admin, with no admin keys file"])
async def test_exec_grant_without_a_pinned_administrators_key_fails_with_one_line(harness, deployment, admin):
    """bob's key is registered (an approver) but not pinned; without --admin, a deployment of its own has no
    default administrator; without BAMBOO_ADMIN_KEYS_FILE, nobody is pinned. No grant row is written."""
    env = dict(deployment)
    flags = ["--admin", admin.split(",")[0]] if admin else []
    if admin and "no admin keys file" in admin:
        del env["BAMBOO_ADMIN_KEYS_FILE"]
    code, _, err = await bamboo(env, "exec", "grant", "--environment", "prod", "--tool", "panda_curl", "--rule",
                                "panda_task_kill", "--target", f"panda:task:{TASK}", *flags, operator="bob")
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert ("not a pinned administrator's key" if admin else "--admin") in lines[0], lines[0]
    async with harness.pool.connection() as conn:
        assert (await (await conn.execute("SELECT count(*) FROM capability_grants")).fetchone())[0] == 0


@pytest.mark.parametrize("case", ["no tools file", "no verification keys", "bad environment", "bare verification key",
                                  "environment neither gated nor ungated"])
def test_a_misconfigured_executor_exits_with_one_line(case, tmp_path):
    import subprocess

    tools = tmp_path / "tools.toml"
    tools.write_text(TOOLS_TOML.format(curl=CURL, host="127.0.0.1:1"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAMBOO_")} | {"PYTHONPATH": str(ROOT)}
    environment = "prod"
    if case != "no tools file":
        env["BAMBOO_COMMAND_TOOLS_FILE"] = str(tools)
    if case == "bad environment":
        environment = "Prod;rm"
        env["BAMBOO_EXECUTOR_VERIFY_KEYS_FILE"] = str(tmp_path / "missing.keys")
    if case == "bare verification key":  # the format before keys named whose they are
        bare = tmp_path / "bare.keys"
        bare.write_text(KeyStore(tmp_path / "keys").create("agent").public_key + "\n")
        env["BAMBOO_EXECUTOR_VERIFY_KEYS_FILE"] = str(bare)
    if case == "environment neither gated nor ungated":  # a naming slip for prod ran writes with no gate at all
        environment = "production"
        keys = tmp_path / "verify.keys"
        keys.write_text(f"agent agent {KeyStore(tmp_path / 'keys').create('agent').public_key}\n")
        env["BAMBOO_EXECUTOR_VERIFY_KEYS_FILE"] = str(keys)
    proc = subprocess.run([sys.executable, "-m", "worker.executor", "--environment", environment, "--channel", "rw"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    expected = {"no tools file": "BAMBOO_COMMAND_TOOLS_FILE", "no verification keys": "BAMBOO_EXECUTOR_VERIFY_KEYS_FILE",
                "bad environment": "is not a valid name",
                "bare verification key": "is a bare key; each line now names whose key it is: 'agent IDENTITY "
                                         "BASE64KEY' or 'person IDENTITY BASE64KEY'",
                "environment neither gated nor ungated": "the environment 'production' is neither gated (prod) nor "
                                                         "ungated (staging); add it to "
                                                         "BAMBOO_EXECUTOR_GATED_ENVIRONMENTS"}[case]
    assert expected in lines[0]
