"""The PanDA client's own CLI as a command tool: ``pbook kill <task>`` against the simulator, which accepts
only one OIDC bearer token. The token reaches pbook only as the credential family's environment variable
(``PANDA_AUTH_ID_TOKEN``), declared by a standalone ``{{secret:...}}``; without it the server refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from bamboo.commands.config import load_command_config
from bamboo.commands.credentials import clean_environment
from bamboo.commands.runner import run_command
from bamboo.panda.simulator import PandaSimulator
from policy.commands import CommandDenied
from tests.contract.oidc_issuer import OidcIssuer
from tests.panda.incidents import RUNNING_TASK, write_incidents

from .helpers import allow, deny

VENV = Path(sys.executable).parent.parent  # the project's environment, where panda-client installed pbook
PBOOK = VENV / "bin" / "pbook"

TOOLS = """
[credentials.panda_oidc]
env = {{ PANDA_AUTH_ID_TOKEN = "TEST_EXECUTOR_PANDA_TOKEN" }}

[[tools]]
name = "pbook"
executable = "{pbook}"
description = "panda-client's pbook"

[tools.environment]
PANDA_SYS = "{venv}"
VIRTUAL_ENV = "{venv}"
PANDA_URL = "{url}"
PANDA_URL_SSL = "{url}"
PANDACACHE_URL = "{url}"
PANDA_BEHIND_REAL_LB = "1"
PANDA_VERIFY_HOST = "off"
PANDA_AUTH = "oidc"
PANDA_AUTH_VO = "atlas"

[[rules]]
name = "pbook_kill"
tool = "pbook"
access = "write"
environments = ["staging"]
channel = "rw"
credential = "panda_oidc"
subcommand = ["kill"]
positionals = [{{ name = "task", value = "integer" }}]
targets = [{{ source = "positional", index = 0, template = "panda:task:{{value}}" }}]
"""

pytestmark = pytest.mark.skipif(not PBOOK.exists(), reason="panda-client's pbook is not installed (make install)")


@pytest.fixture(scope="module")
def token():
    with OidcIssuer() as issuer:
        yield issuer.mint("bamboo tester", ["atlas"])


@pytest.fixture(scope="module")
def token_sim(tmp_path_factory, token):
    with PandaSimulator(write_incidents(tmp_path_factory.mktemp("pbook-incidents")), require_token=token) as sim:
        yield sim


@pytest.fixture(scope="module")
def pbook_config(tmp_path_factory, token_sim):
    path = tmp_path_factory.mktemp("pbook-config") / "tools.toml"
    path.write_text(TOOLS.format(pbook=PBOOK, venv=VENV, url=token_sim.url))
    return load_command_config(path)


def _kills(sim: PandaSimulator) -> list[dict]:
    return [c for c in httpx.get(f"{sim.base_url}/sim/calls").json() if c["endpoint"] == "task/kill"]


async def test_pbook_kill_runs_with_the_family_token_and_nothing_else(pbook_config, token_sim, token, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-Zx81kQpLm2nB7vC4dR9sT1uW6yA3eF5gH0jK")
    match = allow(pbook_config.policy, "pbook", ["pbook", "{{secret:PANDA_AUTH_ID_TOKEN}}", "kill", str(RUNNING_TASK)],
                  channel="rw")
    assert match.targets == [f"panda:task:{RUNNING_TASK}"] and match.secrets == ["PANDA_AUTH_ID_TOKEN"]
    assert token not in " ".join(match.argv)
    env = clean_environment(match, pbook_config.credentials, {"TEST_EXECUTOR_PANDA_TOKEN": token,
                                                               "OPENAI_API_KEY": "sk-proj-x"})
    assert "OPENAI_API_KEY" not in env
    before = len(_kills(token_sim))
    outcome = await run_command(match, env, timeout_s=120, output_limit=256 * 1024)
    kills = _kills(token_sim)
    assert len(kills) == before + 1, (outcome.stdout, outcome.stderr)
    assert kills[-1]["task_id"] == RUNNING_TASK and kills[-1]["authenticated"] and kills[-1]["accepted"]
    assert token not in outcome.stdout + outcome.stderr


async def test_with_another_token_in_the_family_variable_the_server_refuses(pbook_config, token_sim):
    """The same command with a well-formed token the server does not know: the server, not the policy, says no,
    so the credential is the hard boundary behind the rule."""
    with OidcIssuer() as stranger:
        foreign = stranger.mint("someone else", ["atlas"])
    match = allow(pbook_config.policy, "pbook", ["pbook", "kill", str(RUNNING_TASK)], channel="rw")
    env = clean_environment(match, pbook_config.credentials, {"TEST_EXECUTOR_PANDA_TOKEN": foreign})
    before = len(_kills(token_sim))
    await run_command(match, env, timeout_s=120, output_limit=256 * 1024)
    new = _kills(token_sim)[before:]
    assert len(new) == 1 and not new[0]["accepted"] and not new[0]["authenticated"]
    with pytest.raises(CommandDenied, match="needs TEST_EXECUTOR_PANDA_TOKEN"):
        clean_environment(match, pbook_config.credentials, {})


def test_pbook_cannot_run_python_or_another_command(pbook_config):
    deny(pbook_config.policy, "pbook", ["pbook", "-c", "import os; os.system('id')"], "no rule allows", channel="rw")
    deny(pbook_config.policy, "pbook", ["pbook", "kill", "1;id"], "no rule allows", channel="rw")
    deny(pbook_config.policy, "pbook", ["pbook", "retry", "1"], "no rule allows", channel="rw")
