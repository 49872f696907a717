"""Process sandbox for generated code and the token-gated tool bridge it calls tools through."""

from bamboo.sandbox.bridge import ToolBridge, bridgeable, new_token
from bamboo.sandbox.models import (
    BridgeLimits,
    CallRecord,
    OutputLimits,
    SandboxLimits,
    SandboxRunResult,
    StreamCapture,
)
from bamboo.sandbox.errors import SandboxRefused, SandboxUnavailable
from bamboo.sandbox.runner import SandboxRunner
from bamboo.sandbox.service import CodeExecutor
from bamboo.sandbox.stubs import STUB_MODULE, generate_stub_module

__all__ = [
    "STUB_MODULE",
    "BridgeLimits",
    "CallRecord",
    "CodeExecutor",
    "OutputLimits",
    "SandboxLimits",
    "SandboxRefused",
    "SandboxRunResult",
    "SandboxRunner",
    "SandboxUnavailable",
    "StreamCapture",
    "ToolBridge",
    "bridgeable",
    "generate_stub_module",
    "new_token",
]
