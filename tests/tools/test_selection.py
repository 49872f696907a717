from __future__ import annotations

import pytest

from bamboo.panda.tools import builtin_tools
from bamboo.tools.selection import (
    RetrievalUnavailable,
    SelectionConfig,
    ToolBudgetError,
    ToolSelector,
    config_namespace,
    merge_sources,
    offline_token_counter,
    reserve_full_slots,
    truncated_block,
)
from bamboo.tools.vector_index import MemoryVectorIndex

from .support import BrokenIndex, HashingEmbedder, filler_specs

PROMPT = "You investigate PanDA task failures.\nTools:\n{tools}\nWrite Python that calls the tools."
PANDA = [t.spec for t in builtin_tools()]


def selector(index=None, **config) -> ToolSelector:
    return ToolSelector(index or MemoryVectorIndex(), HashingEmbedder(), "ns-test", SelectionConfig(**config))


def test_offline_tokenizer_counts_without_truncation() -> None:
    count = offline_token_counter()
    assert count("hello world") == 2
    assert count(" ".join(["memory"] * 1000)) == 1000


async def test_small_catalogue_is_shown_whole_without_retrieval() -> None:
    index = MemoryVectorIndex()
    block = await selector(index).select(PROMPT, "job ran out of memory", PANDA)
    assert block.mode == "all"
    assert block.full == [t.name for t in PANDA] and not block.compact and not block.omitted
    assert index.upserts == 0
    assert "args schema" in block.text and "MODIFIES-STATE" in block.text


async def test_large_catalogue_caps_full_schemas_and_fits_the_budget() -> None:
    tools = PANDA + filler_specs(300)
    sel = selector(max_full_schemas=8, context_window=4096, budget_margin=512)
    block = await sel.select(PROMPT, "scout jobs exceeded memory: maxPSS above ramCount", tools)
    assert block.mode == "selected"
    assert len(block.full) == 8
    assert "get_scout_job_details" in block.full
    assert block.omitted, "a 300-tool catalogue cannot fit 3.5k tokens"
    assert block.prompt_tokens == offline_token_counter()(block.text)
    assert block.prompt_tokens <= 4096 - 512
    assert set(block.full + block.compact + block.omitted) == {t.name for t in tools}


async def test_unchanged_tools_are_not_re_embedded() -> None:
    index = MemoryVectorIndex()
    sel = selector(index, max_full_schemas=5)
    tools = PANDA + filler_specs(30)
    await sel.select(PROMPT, "memory", tools)
    first = index.upserts
    await sel.select(PROMPT, "walltime", tools)
    assert first == len(tools) and index.upserts == first
    changed = [tools[0].model_copy(update={"description": "new words"}), *tools[1:]]
    await sel.select(PROMPT, "walltime", changed)
    assert index.upserts == first + 1


async def test_past_runs_that_found_a_cause_weigh_more() -> None:
    sel = selector(max_full_schemas=5, reserved_explore=0)
    tools = PANDA + filler_specs(40)
    await sel.record_approved_run("task failed with memory errors", ["queue_config_3"], ended_in_cause=False)
    await sel.record_approved_run("task failed with memory errors", ["storage_quota_6"], ended_in_cause=True)
    order = await sel.rank("task failed with memory errors", tools)
    assert order[:2] == ["storage_quota_6", "queue_config_3"]


async def test_reserved_quota_keeps_description_matches_in_full() -> None:
    sel = selector(max_full_schemas=4, reserved_explore=2)
    tools = PANDA + filler_specs(40)
    for i in range(5):
        await sel.record_approved_run("payload killed out of memory", [f"ticket_search_{5 + 10 * (i % 4)}",
                                                                     f"network_paths_{7 + 10 * (i % 4)}"], True)
    query = "payload killed out of memory, check scout job maxPSS"
    block = await sel.select(PROMPT, query, tools)
    top_descriptions = (await selector(max_full_schemas=4, reserved_explore=2).rank(query, tools))[:2]
    history = {"ticket_search_5", "ticket_search_15", "ticket_search_25", "ticket_search_35",
               "network_paths_7", "network_paths_17", "network_paths_27", "network_paths_37"}
    assert len(set(block.full) & history) == 2
    assert set(top_descriptions) <= set(block.full)
    assert not set(top_descriptions) & history


def test_merge_and_reserve_rules() -> None:
    assert merge_sources(["h1", "h2", "h3"], ["d1", "h2", "d2"], 2) == ["h1", "d1", "h2", "h3", "d2"]
    assert reserve_full_slots(["h1", "h2", "h3", "d1", "d2"], ["d1", "d2"], 3) == ["h1", "d1", "d2", "h2", "h3"]


async def test_namespaces_keep_configurations_apart() -> None:
    index = MemoryVectorIndex()
    a = config_namespace('{"servers": []}', "minilm", 384)
    b = config_namespace('{"servers": [{"name": "x"}]}', "minilm", 384)
    assert a != b and a == config_namespace('{"servers": []}', "minilm", 384)
    embedder = HashingEmbedder()
    sel_a = ToolSelector(index, embedder, a, SelectionConfig(max_full_schemas=3, reserved_explore=0))
    sel_b = ToolSelector(index, embedder, b, SelectionConfig(max_full_schemas=3, reserved_explore=0))
    tools = PANDA + filler_specs(20)
    await sel_a.record_approved_run("disk full", ["user_quota_8"], True)
    assert (await sel_a.rank("disk full", tools))[0] == "user_quota_8"
    assert (await sel_b.rank("disk full", tools))[0] != "user_quota_8"


async def test_retrieval_failure_is_loud_and_the_fallback_is_a_truncated_list() -> None:
    tools = PANDA + filler_specs(100)
    config = SelectionConfig(max_full_schemas=5, context_window=2048, budget_margin=256)
    with pytest.raises(RetrievalUnavailable, match="vector store is down"):
        await ToolSelector(BrokenIndex(), HashingEmbedder(), "ns", config).select(PROMPT, "memory", tools)
    block = truncated_block(PROMPT, tools, config)
    assert block.mode == "truncated" and not block.full and block.compact and block.omitted
    assert block.prompt_tokens <= 2048 - 256


def test_prompt_without_room_is_an_error() -> None:
    config = SelectionConfig(context_window=64, budget_margin=32)
    with pytest.raises(ToolBudgetError, match="no room for tools"):
        truncated_block(PROMPT + " word" * 100, PANDA, config)
    with pytest.raises(ValueError, match="exactly once"):
        truncated_block("no placeholder", PANDA, config)


async def test_a_fresh_page_offers_the_next_candidates() -> None:
    sel = selector(max_full_schemas=5, context_window=2048, budget_margin=256)
    tools = PANDA + filler_specs(200)
    first = await sel.select(PROMPT, "disk quota of the storage element", tools)
    shown = first.full + first.compact
    second = await sel.select(PROMPT, "disk quota of the storage element", tools, exclude=shown)
    assert second.full and not set(second.full + second.compact) & set(shown)
