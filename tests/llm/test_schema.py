"""The strict-schema rewrite: what OpenAI strict mode and llama.cpp grammars need, still valid JSON Schema."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from bamboo.llm.schema import schema_name_for, strict_json_schema


class Severity(str, Enum):
    LOW = "low"
    HIGH = "high"


class Cause(BaseModel):
    name: str = Field(description="short canonical name")
    severity: Severity = Severity.LOW


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Extraction(BaseModel):
    model_config = ConfigDict(extra="allow")

    primary: Cause = Field(description="the main cause")
    others: list[Cause] = []
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]
    labels: dict[str, int] = {}
    comment: str | None = None


def objects(node, found=None):
    found = [] if found is None else found
    if isinstance(node, dict):
        if "properties" in node:
            found.append(node)
        for key, value in node.items():
            if key == "properties":
                for child in value.values():
                    objects(child, found)
            else:
                objects(value, found)
    elif isinstance(node, list):
        for item in node:
            objects(item, found)
    return found


def test_every_object_is_closed_and_requires_all_its_properties():
    schema = strict_json_schema(Extraction)
    found = objects(schema)
    assert {tuple(sorted(o["properties"])) for o in found} >= {
        ("comment", "labels", "others", "pet", "primary"), ("name", "severity"), ("kind", "lives"), ("good", "kind")
    }
    for obj in found:
        assert obj["additionalProperties"] is False
        assert sorted(obj["required"]) == sorted(obj["properties"])


def test_defaults_one_of_and_ref_siblings_are_removed():
    schema = strict_json_schema(Extraction)
    text = repr(schema)
    assert "'default'" not in text and "oneOf" not in text and "discriminator" not in text
    primary = schema["properties"]["primary"]
    assert "$ref" not in primary and primary["description"] == "the main cause"
    assert primary["properties"]["name"]["description"] == "short canonical name"


def test_maps_keep_their_value_schema():
    labels = strict_json_schema(Extraction)["properties"]["labels"]
    assert labels["additionalProperties"] == {"type": "integer"}


def test_result_is_a_valid_schema_that_accepts_what_the_model_accepts():
    schema = strict_json_schema(Extraction)
    jsonschema.Draft202012Validator.check_schema(schema)
    document = {
        "primary": {"name": "oom", "severity": "high"},
        "others": [],
        "pet": {"kind": "dog", "good": True},
        "labels": {"a": 1},
        "comment": None,
    }
    jsonschema.validate(document, schema)
    Extraction.model_validate(document)
    bad = dict(document, extra_key=1)
    assert not jsonschema.Draft202012Validator(schema).is_valid(bad)


def test_pydantic_schema_is_not_mutated():
    before = Extraction.model_json_schema()
    strict_json_schema(Extraction)
    assert Extraction.model_json_schema() == before


def test_schema_names():
    assert schema_name_for(Cause) == "Cause"
    assert schema_name_for(Cause, "a b.c") == "a_b_c"
    assert len(schema_name_for(Cause, "x" * 100)) == 64
