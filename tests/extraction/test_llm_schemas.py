"""Every string an accumulation answer may hold is bounded, list items included: a grammar-constrained small
model otherwise runs on inside one string until the answer's token limit cuts it and the incident fails."""

from __future__ import annotations

import pytest

from bamboo.extraction.llm_schemas import CanonicalLabels, EmailExtraction, ReviewVerdict


def _unbounded(node, path="$"):
    if isinstance(node, dict):
        if node.get("type") == "string" and "maxLength" not in node and "enum" not in node:
            yield path
        if node.get("type") == "array" and "maxItems" not in node:
            yield path + "[]"
        for key, value in node.items():
            yield from _unbounded(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _unbounded(value, f"{path}[{i}]")


@pytest.mark.parametrize("model", [EmailExtraction, CanonicalLabels, ReviewVerdict])
def test_every_string_and_list_of_an_accumulation_answer_is_bounded(model) -> None:
    assert list(_unbounded(model.model_json_schema())) == []
