"""The external MCP servers file (``BAMBOO_MCP_SERVERS_CONFIG``): which servers, how to reach them,
which of their tools to show, and which of those the operator vouches for as read-only.

Example::

    {"servers": [
      {"name": "atlas", "url": "https://mcp.example.org/mcp",
       "headers": {"Authorization": "Bearer ${ATLAS_TOKEN}"},
       "include_tools": ["^get_"], "read_only_tools": ["get_site_status"]},
      {"name": "time", "command": "mcp-server-time", "args": [], "trust_annotations": true}
    ]}
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+\Z")


class McpConfigError(ValueError):
    """The servers file is missing, not JSON, or does not match the schema; the message says where."""


def expand_env(value: str, environ: dict[str, str] | None = None) -> str:
    """Replace ``${VAR}``; an unset variable is an error rather than a silent empty credential."""
    env = os.environ if environ is None else environ

    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise McpConfigError(f"environment variable {name} is not set (referenced as ${{{name}}})")
        return env[name]

    return _ENV_RE.sub(repl, value)


class McpServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    include_tools: list[str] = Field(default_factory=list, description="regexes; empty = all")
    exclude_tools: list[str] = Field(default_factory=list, description="regexes applied after include")
    enabled: bool = True
    read_only_tools: list[str] = Field(default_factory=list, description="tool names the operator vouches for")
    trust_annotations: bool = Field(default=False, description="accept the server's read_only_hint")
    connect_timeout_s: float = Field(default=20.0, gt=0)
    call_timeout_s: float = Field(default=60.0, gt=0)
    reconnect_interval_s: float = Field(default=10.0, ge=0, description="least time between reconnect attempts")

    @field_validator("name")
    @classmethod
    def _name_chars(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("name may contain only letters, digits, '_', '.', '-'")
        return v

    @field_validator("include_tools", "exclude_tools")
    @classmethod
    def _regexes_compile(cls, patterns: list[str]) -> list[str]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {p!r}: {exc}") from exc
        return patterns

    @model_validator(mode="after")
    def _exactly_one_transport(self) -> "McpServerConfig":
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of 'url' (Streamable HTTP) or 'command' (stdio)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        return self

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def wants(self, tool_name: str) -> bool:
        if self.include_tools and not any(re.search(p, tool_name) for p in self.include_tools):
            return False
        return not any(re.search(p, tool_name) for p in self.exclude_tools)

    def resolved_headers(self) -> dict[str, str]:
        return {k: expand_env(v) for k, v in self.headers.items()}

    def resolved_env(self) -> dict[str, str]:
        return {k: expand_env(v) for k, v in self.env.items()}


class McpServersConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: list[McpServerConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> "McpServersConfig":
        seen: set[str] = set()
        for s in self.servers:
            if s.name in seen:
                raise ValueError(f"server name {s.name!r} appears twice")
            seen.add(s.name)
        return self

    def fingerprint(self) -> str:
        """Stable text of the effective config, used to namespace tool vectors per configuration."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


def _format_errors(exc: ValidationError, raw: Any) -> str:
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        where = ""
        if len(loc) >= 2 and loc[0] == "servers" and isinstance(loc[1], int):
            servers = raw.get("servers") if isinstance(raw, dict) else None
            name = servers[loc[1]].get("name") if isinstance(servers, list) and isinstance(servers[loc[1]], dict) else None
            where = f"servers[{loc[1]}]" + (f" ({name})" if name else "")
            loc = loc[2:]
        field = ".".join(str(p) for p in loc)
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{where}{'.' if where and field else ''}{field}: {msg}".lstrip(": "))
    return "; ".join(lines)


def parse_servers_config(raw: Any, source: str = "MCP servers config") -> McpServersConfig:
    try:
        return McpServersConfig.model_validate(raw)
    except ValidationError as exc:
        raise McpConfigError(f"{source} is invalid: {_format_errors(exc, raw)}") from exc


def load_servers_config(path: Path | None) -> McpServersConfig:
    """No path means no external servers; a path that cannot be read or parsed is an error."""
    if path is None:
        return McpServersConfig()
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        raise McpConfigError(f"cannot read MCP servers config {path}: {exc.strerror or exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"MCP servers config {path} is not valid JSON: line {exc.lineno}: {exc.msg}") from exc
    return parse_servers_config(raw, f"MCP servers config {path}")
