"""`bamboo exec run --json` prints the executor's answer, whose stdout and stderr are what the server's command
printed: pydantic's `model_dump_json` wrote its C1 controls (U+009B, the one-character CSI), bidi overrides and
zero-width characters raw to the terminal. The JSON goes out ASCII, the text it carries unchanged."""

from __future__ import annotations

import json
from unittest import mock

from typer.testing import CliRunner

import bamboo.temporal_client as temporal_client
from bamboo.cli import exec_cmd
from bamboo.cli.main import app
from bamboo.executors import client as exec_client
from bamboo.executors import signer
from bamboo.executors.contract import ExecResult, StepOutcome

HOSTILE = "ok \u009b2J\u009b31mALL CLEAR\u009b0m \u202etxt.exe\u200b \x1b[2J"


def test_exec_run_json_is_ascii_and_carries_the_exact_output():
    result = ExecResult(environment="prod", channel="ro", tool="panda_cli", rule="show", access="read", targets=[],
                        outcome=StepOutcome(exit_code=0, stdout=HOSTILE, stderr=HOSTILE, truncated=False,
                                            duration_s=0.1))

    async def execute(*_a, **_k):
        return result

    async def connect(*_a, **_k):
        return object()

    with mock.patch.object(exec_cmd, "_key", lambda s, i: object()), \
            mock.patch.object(exec_cmd, "_claims", lambda *a, **k: (object(), None)), \
            mock.patch.object(signer, "sign", lambda c, k: object()), \
            mock.patch.object(exec_client, "execute", execute), mock.patch.object(temporal_client, "connect", connect):
        out = CliRunner().invoke(app, ["exec", "run", "panda_cli", "--environment", "prod", "--channel", "ro",
                                       "--json", "--", "show", "1"])
    assert out.exit_code == 0, out.output
    assert out.output.isascii()
    assert ExecResult.model_validate(json.loads(out.output)) == result
