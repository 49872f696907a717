"""The names and signatures the executor side builds against: fields may be added, none renamed or removed."""

from __future__ import annotations

import inspect

from bamboo.commands import config, credentials, runner
from policy import commands


def test_policy_models_keep_their_fields():
    assert {"name", "executable", "description", "root"} <= set(commands.CommandTool.model_fields)
    assert {"name", "tool", "access", "environments", "channel", "credential", "supports_dry_run",
            "dry_run_flag"} <= set(commands.CommandRule.model_fields)
    assert {"tools", "rules"} <= set(commands.CommandPolicy.model_fields)
    assert {"tool", "rule", "access", "executable", "argv", "credential", "targets",
            "dry_run_argv"} <= set(commands.CommandMatch.model_fields)
    assert issubclass(commands.CommandDenied, Exception) and commands.CommandDenied("x").reason == "x"


def test_functions_keep_their_signatures():
    evaluate = inspect.signature(commands.evaluate)
    assert list(evaluate.parameters)[:5] == ["policy", "tool", "argv", "environment", "channel"]
    assert evaluate.parameters["environment"].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(inspect.signature(commands.argv_digest).parameters) == ["argv"]
    assert list(inspect.signature(credentials.clean_environment).parameters) == ["match", "families", "source"]
    run = inspect.signature(runner.run_command)
    assert list(run.parameters) == ["match", "env", "timeout_s", "output_limit"]
    assert inspect.iscoroutinefunction(runner.run_command)
    assert {"exit_code", "stdout", "stderr", "truncated", "duration_s"} <= set(runner.CommandOutcome.model_fields)
    assert {"name", "env"} <= set(credentials.CredentialFamily.model_fields)
    assert {"policy", "credentials"} <= set(config.CommandConfig.model_fields)
    assert list(inspect.signature(config.load_command_config).parameters) == ["path"]


def test_argv_digest_is_sha256_over_compact_json():
    import hashlib
    import json

    argv = ["/usr/bin/curl", "--disable", "é"]
    expected = hashlib.sha256(json.dumps(argv, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()
    assert commands.argv_digest(argv) == expected
    assert commands.argv_digest(argv) != commands.argv_digest([*argv[:2], "e"])
