"""Synthetic passages shaped like the ones accumulation writes, with clustered embeddings.

Real sentence embeddings of operations text are not uniform on the sphere: the same error dialog
recurs across hundreds of incidents (near-duplicates), paraphrases of one symptom sit together, and
every vector shares a common direction (any two sentences have a positive cosine). Uniform random
vectors are the worst case for an HNSW graph and say little about this store, so the generator
builds:

- a shared direction every vector leans towards;
- per section, clusters whose sizes follow a power law (a few common symptoms, a long tail of rare
  ones), each with a centre and a low-rank spread (a cluster varies along a few directions, as
  paraphrases do, plus a little isotropic noise);
- sections with skewed sizes: Task_Context and Symptom dominate, as accumulation writes them, Cause is
  one per incident, and two small sections (Resolution, Operator_Note) stand for anything rarer, so a
  filtered query on a small fraction of the table is exercised.

Queries are drawn from the same clusters (new points, not stored rows), so each has true neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DIM = 384
# Share of the table per section (sums to 1).
SECTIONS: dict[str, float] = {
    "Task_Context": 0.44,
    "Symptom": 0.34,
    "Cause": 0.17,
    "Resolution": 0.04,
    "Operator_Note": 0.01,
}
RANK = 32  # directions a cluster varies along (the local dimension of paraphrases)
ROWS_PER_CLUSTER = 60  # mean; sizes are power-law distributed around it


@dataclass
class Cluster:
    section: str
    centre: np.ndarray
    basis: np.ndarray  # RANK x DIM
    spread: float


@dataclass
class Corpus:
    sections: np.ndarray  # one section name per row
    vectors: np.ndarray  # rows x DIM, unit length, float32
    clusters: list[Cluster]
    members: np.ndarray  # cluster index per row


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def _points(rng: np.random.Generator, c: Cluster, n: int) -> np.ndarray:
    z = rng.normal(0, c.spread / np.sqrt(RANK), (n, RANK))
    iso = rng.normal(0, 0.15 / np.sqrt(DIM), (n, DIM))
    return _unit(c.centre + z @ c.basis + iso)


def generate(rows: int, seed: int = 25) -> Corpus:
    rng = np.random.default_rng(seed)
    shared = _unit(rng.normal(size=DIM))
    clusters: list[Cluster] = []
    sizes: list[int] = []
    for section, share in SECTIONS.items():
        n = max(1, round(rows * share))
        count = max(2, n // ROWS_PER_CLUSTER)
        weights = rng.pareto(1.2, count) + 1.0
        part = np.maximum(1, np.floor(weights / weights.sum() * n)).astype(int)
        part[np.argmax(part)] += n - part.sum()  # the common cluster absorbs the rounding
        lean = _unit(shared + 0.8 * _unit(rng.normal(size=DIM)))  # sections differ in their direction
        for size in part:
            centre = _unit(lean + 0.9 * _unit(rng.normal(size=DIM)))
            basis = np.linalg.qr(rng.normal(size=(DIM, RANK)))[0].T
            clusters.append(Cluster(section, centre, basis, spread=float(rng.uniform(0.15, 0.9))))
            sizes.append(int(size))
    members = np.repeat(np.arange(len(clusters)), sizes)
    vectors = np.empty((len(members), DIM), dtype=np.float32)
    start = 0
    for i, size in enumerate(sizes):
        vectors[start:start + size] = _points(rng, clusters[i], size)
        start += size
    order = rng.permutation(len(members))  # stored in no particular order, as incidents arrive
    members = members[order]
    sections = np.array([clusters[m].section for m in members])
    return Corpus(sections=sections, vectors=vectors[order], clusters=clusters, members=members)


def queries(corpus: Corpus, n: int, section: str | None, seed: int) -> np.ndarray:
    """`n` new points from clusters of `section` (any section when None), clusters picked in
    proportion to their size, as the questions asked of a store follow what it holds."""
    rng = np.random.default_rng(seed)
    pool = corpus.members if section is None else corpus.members[corpus.sections == section]
    picked = rng.choice(pool, n)
    return np.vstack([_points(rng, corpus.clusters[int(c)], 1) for c in picked])
