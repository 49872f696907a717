"""The tool-calling layer: external MCP servers, the composite caller, and Bamboo's own MCP server."""
