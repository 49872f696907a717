"""Credentials: one family per command, chosen by the rule; model-provider keys never reach the child; a
{{secret:NAME}} is a whole-argument declaration and never part of an argument; what the child prints of a
credential comes back scrubbed. The child environments here are real: printenv prints what it was given."""

from __future__ import annotations

import os

import pytest

from bamboo.commands.config import CommandConfig
from bamboo.commands.credentials import CredentialFamily, clean_environment
from bamboo.commands.runner import CREDENTIAL_REDACTION, run_command
from policy.commands import CommandDenied

from .helpers import allow, deny

PROVIDER_KEYS = {
    "OPENAI_API_KEY": "sk-proj-Zx81kQpLm2nB7vC4dR9sT1uW6yA3eF5gH0jK",
    "BAMBOO_LLM_API_KEY": "llm-key-4f9a7c2e1b8d6f3a5c0e9b7d2f4a6c8e",
    "ANTHROPIC_API_KEY": "sk-ant-api03-Qw9Er8Ty7Ui6Op5As4Df3Gh2Jk1Lz0Xc",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "TEST_PANDA_RW_TOKEN": "rw-token-never-on-ro",
    "TEST_RUCIO_RO_TOKEN": "rucio-token-other-family",
    "http_proxy": "http://10.0.0.1:3128", "CURL_HOME": "/tmp", "GIT_CONFIG_GLOBAL": "/tmp/evil-gitconfig",
}
RO_TOKEN = "hunter2-panda-ro"  # low entropy on purpose: no pattern recognises it, only the literal value does


@pytest.fixture
def executor_env(monkeypatch) -> dict[str, str]:
    """The executor process's own environment: provider keys, other families, proxy settings, the ro token."""
    for name, value in {**PROVIDER_KEYS, "TEST_PANDA_RO_TOKEN": RO_TOKEN}.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


def _lines(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


async def test_the_child_sees_runtime_variables_and_exactly_one_family(config: CommandConfig, executor_env):
    match = allow(config.policy, "env_probe", ["printenv"])
    env = clean_environment(match, config.credentials, executor_env)
    outcome = await run_command(match, env, timeout_s=10, output_limit=64 * 1024)
    seen = _lines(outcome.stdout)
    assert outcome.exit_code == 0
    assert set(seen) == {"PATH", "LANG", "LC_ALL", "HOME", "TZ", "PANDA_AUTH_TOKEN"}, sorted(seen)
    assert seen["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert seen["HOME"].startswith("/tmp/bamboo-cmd-home-") and not os.path.exists(seen["HOME"])
    for name, value in PROVIDER_KEYS.items():
        assert name not in outcome.stdout
        if "KEY" in name or "TOKEN" in name:
            assert value not in outcome.stdout
    assert seen["PANDA_AUTH_TOKEN"] == CREDENTIAL_REDACTION  # printed by the child, scrubbed on the way back
    assert RO_TOKEN not in outcome.stdout and outcome.redactions >= 1


async def test_a_rule_without_a_family_gets_no_credential(config: CommandConfig, executor_env):
    match = allow(config.policy, "env_probe", ["printenv"], environment="dev")
    env = clean_environment(match, config.credentials, executor_env)
    outcome = await run_command(match, env, timeout_s=10, output_limit=64 * 1024)
    assert set(_lines(outcome.stdout)) == {"PATH", "LANG", "LC_ALL", "HOME", "TZ"}


async def test_a_credential_value_printed_by_the_child_comes_back_scrubbed(config: CommandConfig, executor_env):
    match = allow(config.policy, "env_probe", ["printenv", "PANDA_AUTH_TOKEN"])
    outcome = await run_command(match, clean_environment(match, config.credentials, executor_env),
                                timeout_s=10, output_limit=4096)
    assert outcome.stdout.strip() == CREDENTIAL_REDACTION and RO_TOKEN not in outcome.stdout


async def test_secret_shaped_output_is_scrubbed_by_the_project_scrubber(config: CommandConfig, root, executor_env):
    (root / "leaky.ini").write_text("[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
                                    "token: ghp_R7x2Lk9Qm4Tz8Wc1Vb6Ny3Hd5Js0Fg2Pa7Ue\n")
    match = allow(config.policy, "file_probe", ["cat", "leaky.ini"])
    outcome = await run_command(match, clean_environment(match, config.credentials, executor_env),
                                timeout_s=10, output_limit=4096)
    assert "wJalrXUtnFEMI" not in outcome.stdout and "ghp_R7x2" not in outcome.stdout
    assert "[REDACTED:" in outcome.stdout and "[default]" in outcome.stdout


def test_a_standalone_declaration_is_taken_out_of_argv(config: CommandConfig):
    match = allow(config.policy, "env_probe", ["printenv", "{{secret:PANDA_AUTH_TOKEN}}", "PANDA_AUTH_TOKEN"])
    assert match.secrets == ["PANDA_AUTH_TOKEN"]
    assert not any("secret" in a for a in match.argv) and match.argv[-1] == "PANDA_AUTH_TOKEN"


@pytest.mark.parametrize("arg", [
    "--header=Authorization: Bearer {{secret:PANDA_AUTH_TOKEN}}", "Authorization: {{secret:PANDA_AUTH_TOKEN}}",
    "x{{secret:PANDA_AUTH_TOKEN}}", "{{secret:PANDA_AUTH_TOKEN}} ", "{{ secret:PANDA_AUTH_TOKEN }}",
    "{{SECRET:PANDA_AUTH_TOKEN}}", "{{secret: PANDA_AUTH_TOKEN}}",
])
def test_an_embedded_secret_is_refused(config: CommandConfig, simulator, arg):
    url = f"http://127.0.0.1:{simulator.port}/api/v1/task/get_status"
    deny(config.policy, "panda_curl", ["curl", "-H", arg, url], "embeds a {{secret:...}}")
    deny(config.policy, "env_probe", ["printenv", arg], "embeds a {{secret:...}}")


def test_a_second_credential_family_is_refused(config: CommandConfig):
    deny(config.policy, "env_probe", ["printenv", "{{secret:RUCIO_AUTH_TOKEN}}"], "belongs to credential family 'rucio_ro'")
    deny(config.policy, "env_probe", ["printenv", "{{secret:OPENAI_API_KEY}}"], "is not a variable of credential family")
    deny(config.policy, "env_probe", ["printenv", "{{secret:PANDA_AUTH_TOKEN}}"], "runs with no credential",
         environment="dev")


def test_a_family_variable_missing_from_the_executor_is_refused(config: CommandConfig):
    match = allow(config.policy, "env_probe", ["printenv"])
    with pytest.raises(CommandDenied, match="needs TEST_PANDA_RO_TOKEN"):
        clean_environment(match, config.credentials, {"OPENAI_API_KEY": "sk-x"})


@pytest.mark.parametrize("env", [{"OPENAI_API_KEY": "TEST_X"}, {"TOKEN": "BAMBOO_LLM_API_KEY"},
                                 {"PATH": "TEST_X"}, {"HOME": "TEST_X"}])
def test_a_family_cannot_carry_provider_keys_or_runtime_variables(env):
    with pytest.raises(ValueError):
        CredentialFamily(name="bad", env=env)


def test_a_declaration_picks_among_rules_but_never_two_families(config):
    """Two rules for one tool with different families: the declaration selects the rule whose family holds
    the variable; it cannot add the other family."""
    from policy.commands import CommandPolicy

    policy = config.policy
    rucio = policy.rules[[r.name for r in policy.rules].index("env_probe_ro")].model_copy(
        update={"name": "env_probe_rucio", "credential": "rucio_ro"})
    both = CommandPolicy(tools=policy.tools, rules=[*policy.rules, rucio], credentials=policy.credentials)
    match = allow(both, "env_probe", ["printenv", "{{secret:RUCIO_AUTH_TOKEN}}"])
    assert match.rule == "env_probe_rucio" and match.credential == "rucio_ro"
    deny(both, "env_probe", ["printenv", "{{secret:RUCIO_AUTH_TOKEN}}", "{{secret:PANDA_AUTH_TOKEN}}"],
         "one family per command")
