"""Chat-model access: a structured-output client, error classification, and the offline local server."""

from bamboo.llm.client import LLMClient, local_base_url
from bamboo.llm.errors import (
    FailureKind,
    LLMError,
    LLMOutputError,
    LLMRequestError,
    classify,
    is_retryable,
)
from bamboo.llm.schema import schema_name_for, strict_json_schema

__all__ = [
    "FailureKind",
    "LLMClient",
    "LLMError",
    "LLMOutputError",
    "LLMRequestError",
    "classify",
    "is_retryable",
    "local_base_url",
    "schema_name_for",
    "strict_json_schema",
]
