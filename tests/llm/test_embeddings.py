"""Embedders: the bundled offline MiniLM and an OpenAI-compatible endpoint (the scripted server)."""

from __future__ import annotations

import asyncio
import math

import pytest

from bamboo.embeddings.base import Embedder, EmbeddingConfigError, EmbeddingDimensionError
from bamboo.embeddings.factory import build_embedder
from bamboo.embeddings.local import LocalMiniLMEmbedder
from bamboo.embeddings.remote import OpenAIEmbedder
from bamboo.llm.errors import FailureKind, LLMRequestError
from activities.llm_errors import to_application_error
from bamboo.settings import Settings
from tests.support.scripted_llm import ScriptedLLMServer, fake_embedding

OOM = "Payload exceeded maximum allowed memory"
OOM_PARAPHRASE = "payload ran out of memory"
WALLTIME = "Reached batch system time limit"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


async def test_local_minilm_gives_384_dimensional_unit_vectors(minilm: LocalMiniLMEmbedder):
    vectors = await minilm.embed([OOM, OOM_PARAPHRASE, WALLTIME])
    assert isinstance(minilm, Embedder)
    assert minilm.dim == 384 and minilm.model_id
    assert [len(v) for v in vectors] == [384, 384, 384]
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-4)


async def test_local_minilm_puts_paraphrases_closer_than_unrelated_failures(minilm: LocalMiniLMEmbedder):
    oom, paraphrase, walltime = await minilm.embed([OOM, OOM_PARAPHRASE, WALLTIME])
    assert cosine(oom, paraphrase) > cosine(oom, walltime)
    assert cosine(oom, paraphrase) > 0.7 and cosine(oom, walltime) < 0.6


async def test_local_minilm_is_deterministic_and_independent_of_batching(minilm: LocalMiniLMEmbedder):
    texts = [OOM, "a much longer sentence about a task whose input dataset was deleted at the site " * 3, WALLTIME]
    first = await minilm.embed(texts)
    again = await minilm.embed(texts)
    assert first == again
    one_by_one = [(await minilm.embed([t]))[0] for t in texts]
    for batched, alone in zip(first, one_by_one):
        assert cosine(batched, alone) > 0.9999


async def test_local_minilm_keeps_input_order_across_internal_batches():
    small_batches = LocalMiniLMEmbedder(batch_size=2)
    texts = [f"error {i} " + "x" * (20 - i) for i in range(7)]
    batched = await small_batches.embed(texts)
    singles = [(await small_batches.embed([t]))[0] for t in texts]
    for a, b in zip(batched, singles):
        assert cosine(a, b) > 0.9999


async def test_local_minilm_handles_empty_and_very_long_input(minilm: LocalMiniLMEmbedder):
    assert await minilm.embed([]) == []
    (vector,) = await minilm.embed(["memory " * 5000])  # truncated to 256 tokens
    assert len(vector) == 384


async def test_openai_embedder_against_the_scripted_endpoint():
    with ScriptedLLMServer(embedding_dim=16) as server:
        embedder = OpenAIEmbedder(base_url=server.base_url, model="text-embed", dim=16, batch_size=2)
        vectors = await embedder.embed(["a", "b", "c", "a", "e"])
        await embedder.aclose()
        # requested as base64 float32 (what pgvector stores), so equal to float32 precision
        expected = [fake_embedding(t, 16) for t in ["a", "b", "c", "a", "e"]]
        assert [pytest.approx(v, abs=1e-6) for v in expected] == vectors
        assert server.embedding_inputs == [["a", "b"], ["c", "a"], ["e"]]
    assert isinstance(embedder, Embedder) and embedder.model_id == "text-embed"


async def test_openai_embedder_rejects_vectors_of_another_dimension():
    with ScriptedLLMServer(embedding_dim=8) as server:
        embedder = OpenAIEmbedder(base_url=server.base_url, model="text-embed", dim=384)
        with pytest.raises(EmbeddingDimensionError, match="BAMBOO_EMBEDDING_DIM=8") as caught:
            await embedder.embed(["a"])
        await embedder.aclose()
    assert to_application_error(caught.value).non_retryable is True


async def test_openai_embedder_failures_are_classified():
    with ScriptedLLMServer() as server:
        url = server.base_url
    embedder = OpenAIEmbedder(base_url=url, model="text-embed", dim=384, timeout_s=5)
    with pytest.raises(LLMRequestError) as caught:
        await embedder.embed(["a"])
    assert caught.value.kind == FailureKind.CONNECTION
    assert "BAMBOO_EMBEDDING_BASE_URL" in str(caught.value)
    await embedder.aclose()


def test_build_embedder_picks_local_or_endpoint_and_checks_the_dimension():
    assert isinstance(build_embedder(Settings(_env_file=None)), LocalMiniLMEmbedder)
    remote = build_embedder(Settings(_env_file=None, embedding_base_url="http://emb.example/v1",
                                     embedding_model="text-embedding-3-small", embedding_dim=1536))
    assert isinstance(remote, OpenAIEmbedder) and remote.dim == 1536
    with pytest.raises(EmbeddingConfigError, match="BAMBOO_EMBEDDING_DIM=384"):
        build_embedder(Settings(_env_file=None, embedding_dim=768))
    with pytest.raises(EmbeddingConfigError, match="BAMBOO_EMBEDDING_BASE_URL"):
        build_embedder(Settings(_env_file=None, embedding_model="text-embedding-3-small"))


async def test_local_minilm_does_not_block_the_event_loop(minilm: LocalMiniLMEmbedder):
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    async def embed() -> None:
        await minilm.embed([f"task {i} failed with a memory error at site {i % 7}" for i in range(200)])
        done.set()

    await asyncio.gather(ticker(), embed())
    assert ticks > 5
