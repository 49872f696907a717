from __future__ import annotations

import json
from pathlib import Path

import pytest

from bamboo.mcp.config import McpConfigError, expand_env, load_servers_config, parse_servers_config


def test_full_entry_parses_and_expands_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATLAS_TOKEN", "tok-123")
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"servers": [
        {"name": "atlas", "url": "https://mcp.example.org/mcp",
         "headers": {"Authorization": "Bearer ${ATLAS_TOKEN}"}, "include_tools": ["^get_"],
         "exclude_tools": ["_debug$"], "read_only_tools": ["get_site"]},
        {"name": "time", "command": "mcp-server-time", "env": {"TZ_HINT": "${ATLAS_TOKEN}-x"},
         "trust_annotations": True, "enabled": False},
    ]}))
    config = load_servers_config(path)
    atlas, time_server = config.servers
    assert atlas.transport == "http" and time_server.transport == "stdio"
    assert atlas.resolved_headers() == {"Authorization": "Bearer tok-123"}
    assert time_server.resolved_env() == {"TZ_HINT": "tok-123-x"}
    assert atlas.wants("get_site") and not atlas.wants("kill_site") and not atlas.wants("get_site_debug")
    assert not time_server.enabled


def test_unset_env_variable_is_an_error_not_empty() -> None:
    with pytest.raises(McpConfigError, match="NOPE_NOT_SET"):
        expand_env("Bearer ${NOPE_NOT_SET}", environ={})
    assert expand_env("a $HOME ${X}", environ={"X": "1"}) == "a $HOME 1"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "a"}, "exactly one of 'url'"),
        ({"name": "a", "url": "http://x/mcp", "command": "x"}, "exactly one of 'url'"),
        ({"name": "a", "url": "ftp://x"}, "url must start with"),
        ({"name": "a b", "url": "http://x"}, "name may contain only"),
        ({"name": "a", "url": "http://x", "include_tools": ["("]}, "invalid regular expression"),
        ({"name": "a", "url": "http://x", "readonly_tools": []}, "readonly_tools"),
    ],
)
def test_invalid_entries_name_the_server_and_field(entry: dict, message: str) -> None:
    with pytest.raises(McpConfigError, match=message) as info:
        parse_servers_config({"servers": [entry]})
    assert "servers[0]" in str(info.value)


def test_duplicate_names_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match="appears twice"):
        parse_servers_config({"servers": [{"name": "a", "url": "http://x"}, {"name": "a", "command": "y"}]})
    with pytest.raises(McpConfigError, match="cannot read"):
        load_servers_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(McpConfigError, match="not valid JSON: line 1"):
        load_servers_config(bad)
    assert load_servers_config(None).servers == []
