"""`bamboo dev up | status | down` for real: idempotent, and a taken port is a clear error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from bamboo.devstack.ports import free_port
from tests.services import ROOT


def _bamboo(args, env):
    return subprocess.run([sys.executable, "-m", "bamboo.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.fixture
def dev_env(tmp_path):
    port, ui = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAMBOO_")}
    env.update(BAMBOO_DATA_DIR=str(tmp_path / "data"), BAMBOO_TEMPORAL_ADDRESS=f"127.0.0.1:{port}",
               BAMBOO_TEMPORAL_UI_PORT=str(ui), COLUMNS="200", PYTHONPATH=str(ROOT))
    yield env, port, ui
    _bamboo(["dev", "down"], env)


def test_up_is_idempotent_status_reports_and_down_stops(dev_env):
    env, port, ui = dev_env
    first = _bamboo(["dev", "up", "--no-worker"], env)
    assert first.returncode == 0, first.stderr
    assert "temporal: started" in first.stdout and f"http://127.0.0.1:{ui}" in first.stdout
    second = _bamboo(["dev", "up", "--no-worker"], env)
    assert second.returncode == 0 and "temporal: already running" in second.stdout
    status = _bamboo(["dev", "status"], env)
    assert status.stdout.count("running") >= 2 and f"127.0.0.1:{port}" in status.stdout
    down = _bamboo(["dev", "down"], env)
    assert "temporal: stopped" in down.stdout and "postgres: stopped" in down.stdout
    after = _bamboo(["dev", "status"], env)
    assert "stopped" in after.stdout


def test_taken_port_is_a_clear_error(dev_env):
    env, port, _ = dev_env
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = _bamboo(["dev", "up", "--no-worker"], env)
    assert result.returncode == 1
    assert f"Port {port} on 127.0.0.1 is already taken" in result.stderr
    assert "BAMBOO_TEMPORAL_ADDRESS" in result.stderr


def test_config_show_masks_secrets(dev_env):
    env, _, _ = dev_env
    env = dict(env, BAMBOO_LLM_API_KEY="sk-very-secret", BAMBOO_DATABASE_URL="postgresql://u:hunter2@db/x",
               BAMBOO_LLM_BASE_URL="https://llm.example/v1?api_key=qwerty-key&region=eu",
               BAMBOO_OTEL_ENDPOINT="http://collector:4318?token=otel-token",
               BAMBOO_EMBEDDING_BASE_URL="https://ghp-like-token@embed.example/v1")
    out = _bamboo(["config", "show", "--json"], env).stdout
    for secret in ("sk-very-secret", "hunter2", "qwerty-key", "otel-token", "ghp-like-token"):
        assert secret not in out, secret
    assert "********" in out and "region=eu" in out and "collector:4318" in out


def test_up_right_after_postgres_was_killed_is_not_a_traceback(dev_env):
    """pgserver takes a just-killed server for running (its pid file and socket linger) and the
    connection is refused; `up` waits for it instead of printing a traceback."""
    import signal
    from pathlib import Path

    env, _, _ = dev_env
    env = dict(env, BAMBOO_TEMPORAL_EMBEDDED="false")  # Postgres is what this is about
    assert _bamboo(["dev", "up", "--no-worker"], env).returncode == 0
    pgdata = Path(env["BAMBOO_DATA_DIR"]) / "pgdata"
    os.kill(int((pgdata / "postmaster.pid").read_text().split()[0]), signal.SIGKILL)  # the server `up` started
    again = _bamboo(["dev", "up", "--no-worker"], env)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert "postgres: running" in again.stdout


def test_the_embedded_app_role_cannot_rewrite_the_audit_log(dev_env):
    """`up` makes the app connect as `bamboo_app`, not as the owner, and keeps an audit signing key
    under the data directory: `audit verify` finds neither the owner warning nor a missing checkpoint."""
    from pathlib import Path

    env, _, _ = dev_env
    env = dict(env, BAMBOO_TEMPORAL_EMBEDDED="false")
    up = _bamboo(["dev", "up", "--no-worker"], env)
    assert up.returncode == 0, up.stderr
    keys = Path(env["BAMBOO_DATA_DIR"]) / "keys"
    assert (keys / "audit-signing.key").exists() and (keys / "audit-signing.pub").exists()
    assert oct((keys / "audit-signing.key").stat().st_mode & 0o777) == "0o600"
    state = json.loads((Path(env["BAMBOO_DATA_DIR"]) / "stack.json").read_text())
    assert state["database_url"].startswith("postgresql://bamboo_app@")
    verify = _bamboo(["audit", "verify"], env)
    assert verify.returncode == 0 and "intact" in verify.stdout, verify.stderr
    assert "owner" not in verify.stdout, verify.stdout


@pytest.mark.parametrize("setting, value, named", [
    ("BAMBOO_LLM_CONCURRENCY", "many", "BAMBOO_LLM_CONCURRENCY"),
    ("BAMBOO_BUDGET_SESSION_USD", "2", "BAMBOO_LLM_PRICES"),  # a budget for a model without a price
])
def test_an_invalid_setting_is_one_line_naming_the_variable(dev_env, setting, value, named):
    env, _, _ = dev_env
    out = _bamboo(["dev", "status"], {**env, setting: value, "BAMBOO_LLM_MODEL": "gpt-x"})
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode != 0 and len(lines) == 1, out.stderr
    assert named in lines[0] and "fix the environment" in lines[0]


def test_dev_status_json_lists_every_service(dev_env):
    env, port, _ = dev_env
    out = _bamboo(["dev", "status", "--json"], env)
    services = {s["name"]: s for s in json.loads(out.stdout)}
    assert {"temporal", "postgres", "worker"} <= set(services) and not services["temporal"]["running"]
    assert services["temporal"]["where"] == f"127.0.0.1:{port}"
