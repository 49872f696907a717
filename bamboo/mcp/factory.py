"""Build the tool layer from ``Settings``: the PanDA built-ins plus the configured external servers.

Usage::

    async with build_tool_caller(get_settings()) as tools:
        specs = tools.list_tools()
        result = await tools.call_tool("get_task_details", {"task_id": 123})
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from bamboo.mcp.composite import CompositeToolCaller
from bamboo.mcp.config import McpServersConfig, load_servers_config
from bamboo.mcp.external import client_for
from bamboo.panda.client import PandaClient
from bamboo.panda.toolbox import PandaToolbox
from bamboo.settings import Settings
from bamboo.tools.model import ToolCaller


def build_tool_caller(
    settings: Settings,
    *,
    servers: McpServersConfig | None = None,
    panda_transport: httpx.AsyncBaseTransport | None = None,
    extra_builtins: Sequence[ToolCaller] = (),
) -> CompositeToolCaller:
    """Not yet connected: enter it (``async with``) or call ``connect()``. Raises McpConfigError or
    PandaConfigError when the configuration itself is wrong, since that is the operator's to fix."""
    config = servers if servers is not None else load_servers_config(settings.mcp_servers_config)
    toolbox = PandaToolbox(PandaClient.from_settings(settings, transport=panda_transport))
    # The PanDA toolbox first: nothing added after it can change what its tools' names mean.
    return CompositeToolCaller([toolbox, *extra_builtins], [client_for(s) for s in config.servers])
