"""`bamboo config show` masks every secret-bearing part of the configuration, and URLs and ports are checked.

Issue 27: ``?key=...`` in BAMBOO_LLM_BASE_URL and ``user:password@`` in BAMBOO_PANDA_LOG_HOSTS were printed,
``key`` was no secret name, and ``ftp//nowhere`` or port 99999999 passed validation.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from bamboo.settings import MASK, Settings, mask_url, mask_value
from policy.secret_names import is_secret_name, is_secret_parameter
from tests.services import ROOT

SECRETS = {
    "BAMBOO_LLM_BASE_URL": "https://llm.example/v1?key=AIzaKEY123&model=x",
    "BAMBOO_PANDA_LOG_HOSTS": '["logs.example.org", "alice:hunter2pw@logs2.example.org"]',
    "BAMBOO_OTEL_ENDPOINT": "http://collector:4318#access_token=frag-token",
    "BAMBOO_LLM_PRICES": '{"m": {"input_per_mtok": 1, "output_per_mtok": 2}}',
}


def _bamboo(args: list[str], **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAMBOO_")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="250", **extra)
    return subprocess.run([sys.executable, "-m", "bamboo.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [["config", "show", "--json"], ["config", "show"]])
def test_config_show_masks_url_keys_and_log_host_passwords(args: list[str]) -> None:
    shown = _bamboo(args, **SECRETS)
    assert shown.returncode == 0, shown.stderr
    for secret in ("AIzaKEY123", "hunter2pw", "frag-token"):
        assert secret not in shown.stdout, secret
    for kept in ("model=x", "alice:", "logs2.example.org", "collector:4318"):
        assert kept in shown.stdout, kept


def test_key_is_a_secret_parameter_but_stays_no_secret_name_in_free_text() -> None:
    for name in ("key", "Key", "api_key", "password", "secret", "token", "credential", "sig", "code"):
        assert is_secret_parameter(name), name
    for name in ("model", "region", "page", "key_file", "max_tokens"):
        assert not is_secret_parameter(name), name
    assert not is_secret_name("key")  # the scrubber keeps `key=AOD` readable in logs


def test_mask_url_and_nested_values() -> None:
    assert mask_url("https://h/v1?key=abc&model=x") == f"https://h/v1?key={MASK}&model=x"
    assert mask_url("user:pw@host.example") == f"user:{MASK}@host.example"
    assert mask_url("alice@example.org") == "alice@example.org"  # an address, not a credential
    assert mask_url("https://TOKEN@h/") == f"https://{MASK}@h/"
    assert mask_value({"headers": {"X-Api-Key": "k1", "Accept": "json"}, "hosts": ["u:p@h"]}) == {
        "headers": {"X-Api-Key": MASK, "Accept": "json"}, "hosts": [f"u:{MASK}@h"]}


@pytest.mark.parametrize(("env", "value", "expected"), [
    ("llm_base_url", "ftp//nowhere", "expected http(s)://host[:port][/path]"),
    ("panda_api_url", "ftp://files.example/x", "the scheme is 'ftp'"),
    ("otel_endpoint", "http://collector:99999999", "invalid port number"),
    ("llm_local_port", "99999999", "less than or equal to 65535"),
    ("temporal_ui_port", "-1", "greater than or equal to 0"),
    ("temporal_address", "127.0.0.1:99999999", "expected host:port with a port from 1 to 65535"),
    ("metrics_bind", "nohostport", "expected host:port"),
])
def test_bad_urls_and_ports_are_refused(env: str, value: str, expected: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"BAMBOO_{env.upper()}", value)
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None)
    [error] = info.value.errors()
    assert error["loc"] == (env,) and expected in error["msg"]


def test_a_bad_url_is_one_line_naming_the_setting_without_its_secret() -> None:
    shown = _bamboo(["config", "show"], BAMBOO_LLM_BASE_URL="https//llm.example/v1?key=AIzaKEY123")
    assert shown.returncode == 1
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1 and "BAMBOO_LLM_BASE_URL" in lines[0] and "http(s)://" in lines[0], shown.stderr
    assert "AIzaKEY123" not in shown.stderr


def test_the_defaults_and_ordinary_values_still_validate() -> None:
    settings = Settings(_env_file=None, llm_base_url="http://127.0.0.1:8000/v1", metrics_bind="0.0.0.0:9464",
                        panda_api_url="https://pandaserver.example:25443/api/v1")
    assert settings.panda_api_url == "https://pandaserver.example:25443/api/v1"  # kept as written
    assert Settings(_env_file=None).panda_monitor_url == "http://127.0.0.1:8780"


def test_empty_optional_endpoints_still_mean_none(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LLM_BASE_URL", "EMBEDDING_BASE_URL", "OTEL_ENDPOINT", "METRICS_BIND"):
        monkeypatch.setenv(f"BAMBOO_{name}", "")
    settings = Settings(_env_file=None)
    assert not settings.llm_base_url and not settings.otel_endpoint and not settings.metrics_bind
