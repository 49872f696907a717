from bamboo.tools.model import ToolCaller, ToolOrigin, ToolResult, ToolSpec

__all__ = ["ToolCaller", "ToolOrigin", "ToolResult", "ToolSpec"]
