"""Deterministic stand-ins at the far edge: a hashing embedder and a catalogue of filler tools."""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from bamboo.tools.model import ToolOrigin, ToolResult, ToolSpec

_WORD = re.compile(r"[a-z0-9]+")


class HashingEmbedder:
    """Bag of words and word-pieces hashed into a fixed-size unit vector: same text, same vector."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.model_id = f"test-hashing-{dim}"
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in _WORD.findall(text.lower().replace("_", " ")):
            for feature in (word, *(word[i : i + 4] for i in range(max(len(word) - 3, 1)))):
                digest = hashlib.blake2b(feature.encode(), digest_size=4).digest()
                vec[int.from_bytes(digest, "big") % self.dim] += 1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._vector(t) for t in texts]


class BrokenIndex:
    async def upsert(self, namespace: str, section: str, items: list) -> None:
        raise ConnectionError("vector store is down")

    async def search(self, namespace: str, section: str, embedding: list[float], k: int) -> list:
        raise ConnectionError("vector store is down")


TOPICS = [
    ("site_downtime", "Scheduled downtime calendar of a grid site"),
    ("rucio_replicas", "Replica locations of a dataset in the data management system"),
    ("cvmfs_status", "Health of the software repository mount on worker nodes"),
    ("queue_config", "Batch queue configuration: memory, cores and walltime limits of a site queue"),
    ("pilot_version", "Pilot release running at a site"),
    ("ticket_search", "Search the helpdesk ticket system for open tickets"),
    ("storage_quota", "Free space and quota of a storage element"),
    ("network_paths", "Network throughput between two sites"),
    ("user_quota", "CPU and disk quota of a user in the fair share system"),
    ("release_notes", "Release notes of a software release"),
]


def filler_specs(n: int, server: str = "ops") -> list[ToolSpec]:
    """``n`` plausible external tools; names are unique, descriptions cycle through operations topics."""
    specs = []
    for i in range(n):
        topic, text = TOPICS[i % len(TOPICS)]
        specs.append(ToolSpec(
            name=f"{topic}_{i}", description=f"{text} (variant {i}). Use when investigating {topic.replace('_', ' ')}.",
            input_schema={"type": "object", "properties": {"site": {"type": "string"}, "limit": {"type": "integer"}},
                          "required": ["site"]},
            read_only=i % 7 != 0, external_access=True, origin=ToolOrigin.EXTERNAL, server=server,
        ))
    return specs


class StaticToolCaller:
    """A caller whose tools just echo their arguments: enough to prove a call was dispatched."""

    def __init__(self, specs: list[ToolSpec]) -> None:
        self.specs = specs
        self.called: list[str] = []

    def list_tools(self) -> list[ToolSpec]:
        return list(self.specs)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.called.append(name)
        return ToolResult.success({"tool": name, "arguments": arguments})
