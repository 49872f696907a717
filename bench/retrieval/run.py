"""Passage retrieval at scale (issue 25, item 4): recall@10 against exact search, latency and insert
cost of the section-filtered and unfiltered passage search, before and after issue 25, in one run.

Each size gets a database of its own on the embedded Postgres with pgvector the project starts,
migrated by the product's migrations, so the `passages` table and its indexes are the product's.
The passages are synthetic (`bench/retrieval/corpus.py`): 384-dimensional clustered embeddings in the
sections accumulation writes, with skewed sizes. They are bulk loaded, which is not how production
fills the table:

- the HNSW indexes the migrations created are dropped, the rows COPYed in, the table ANALYZEd, and
  the indexes rebuilt from their own definitions (pg_indexes), as a migration builds them over an
  existing table; production inserts each group of passages through the indexes instead. Both build
  the same kind of graph (pgvector inserts one element at a time either way), but a bulk build may
  run in parallel and in memory, so its time is not what the same rows cost one write at a time:
  that is measured separately, as the insert cost per row through the built indexes at full size
  (batches of `INSERT_BATCH` rows in one statement, as the write path sends a group's passages);
- the index build gets `maintenance_work_mem` = `BUILD_MEMORY` (pgserver's default of 64 MB does
  not hold a 100k-row graph and makes the build crawl); the queries run with the server's defaults.

Phase 1 has only the table-wide index, as before issue 25: the previous search
(`bench/retrieval/previous.py`), the table-wide index at several ef_search values, and an exact scan
of the section. Phase 2 adds the per-section indexes of migration 025: each at several ef_search
values, and the product's `KnowledgeStore.search_passages` as it now is. Exact neighbours are
computed in numpy over the same float32 vectors; a hit counts when its distance is within the k-th
exact distance (ties count as found).

    .venv/bin/python -m bench.retrieval.run [--sizes 10000,100000] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import numpy as np
import psutil
import psycopg
from psycopg import sql

from bamboo.devstack.postgres import start_postgres, stop_postgres
from bamboo.store import knowledge as product
from bamboo.store.db import open_pool
from bench.retrieval import previous
from bench.retrieval.corpus import DIM, SECTIONS, Corpus, generate, queries
from bench.stats import percentile

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("results.md")
DEFAULT_SIZES = [10_000, 100_000]
K = 10
BUILD_MEMORY = "1GB"
INSERT_BATCH = 20
INSERT_ROWS = 200
EF_SWEEP = [40, 100, 200, 400]
UNFILTERED_QUERIES = 100
QUERIES_PER_SECTION = 30
# Target (issue 25): recall@10 against exact search at the largest size, filtered and unfiltered.
TARGET_RECALL = 0.98


@dataclass
class Row:
    size: int
    queries: str
    method: str
    recalls: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


def recall(corpus: Corpus, rows: int, query: np.ndarray, section: str | None, got: list[str]) -> float:
    """Share of the k exact nearest (among the first `rows` rows, within `section`) that `got` holds."""
    dist = 1.0 - corpus.vectors[:rows] @ query
    if section:
        dist = np.where(corpus.sections[:rows] == section, dist, np.inf)
    kth = np.partition(dist, K - 1)[K - 1]
    found = sum(1 for g in got[:K] if dist[int(g[1:])] <= kth + 1e-5)
    return found / K


# ------------------------------------------------------------------ loading and building
async def hnsw_indexes(conn: psycopg.AsyncConnection) -> dict[str, str]:
    rows = await (await conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'passages' AND indexdef LIKE '%%hnsw%%' "
        "ORDER BY indexname")).fetchall()
    return {r[0]: r[1] for r in rows}


async def bulk_load(url: str, corpus: Corpus, rows: int) -> tuple[dict[str, str], float]:
    """Drop the HNSW indexes, COPY the first `rows` passages in, ANALYZE. Returns the index definitions."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        from pgvector.psycopg import register_vector_async

        await register_vector_async(conn)
        defs = await hnsw_indexes(conn)
        for name in defs:
            await conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        started = time.perf_counter()
        async with conn.cursor() as cur:
            async with cur.copy("COPY passages (id, graph_id, section, content, embedding) FROM STDIN "
                                "WITH (FORMAT BINARY)") as copy:
                copy.set_types(["uuid", "text", "text", "text", "vector"])
                for i in range(rows):
                    await copy.write_row((uuid.UUID(int=i + 1), f"g{i}", str(corpus.sections[i]),
                                          f"synthetic passage {i}", corpus.vectors[i]))
        await conn.execute("ANALYZE passages")
        return defs, time.perf_counter() - started


async def build(url: str, defs: dict[str, str]) -> dict[str, float]:
    """Create the given indexes as their definitions say; seconds per index."""
    took = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(BUILD_MEMORY)))
        for name, definition in defs.items():
            started = time.perf_counter()
            await conn.execute(definition.encode())  # pg_indexes' own text
            took[name] = time.perf_counter() - started
        await conn.execute("ANALYZE passages")
    return took


async def insert_cost(pool, corpus: Corpus, start: int) -> float:
    """ms per row to insert INSERT_ROWS passages through the indexes, INSERT_BATCH rows per statement."""
    started = time.perf_counter()
    for lo in range(start, start + INSERT_ROWS, INSERT_BATCH):
        ids = list(range(lo, lo + INSERT_BATCH))
        async with pool.connection() as conn:
            await conn.execute(
                "INSERT INTO passages (id, graph_id, section, content, embedding) "
                "SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::vector[])",
                ([uuid.UUID(int=i + 1) for i in ids], [f"g{i}" for i in ids], [str(corpus.sections[i]) for i in ids],
                 [f"synthetic passage {i}" for i in ids], [corpus.vectors[i] for i in ids]))
    return (time.perf_counter() - started) * 1000 / INSERT_ROWS


# ------------------------------------------------------------------ searching
async def hnsw(pool, vec: np.ndarray, section: str | None, ef: int) -> list[str]:
    """The index at a given ef_search; the section, when given, as a constant (a partial index's
    predicate can match it)."""
    where = sql.SQL("WHERE section = {} ").format(sql.Literal(section)) if section else sql.SQL("")
    query = sql.SQL("SELECT graph_id FROM passages {}ORDER BY embedding <=> %s LIMIT %s").format(where)
    async with pool.connection() as conn:
        async with conn.transaction():
            await conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
            rows = await (await conn.execute(query, [vec, K])).fetchall()
    return [r[0] for r in rows]


async def exact(pool, vec: np.ndarray, section: str | None, _ef: int = 0) -> list[str]:
    where = "WHERE section = %s" if section else ""
    params = [vec, section, K] if section else [vec, K]
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            f"WITH c AS MATERIALIZED (SELECT graph_id, embedding <=> %s AS d FROM passages {where}) "
            "SELECT graph_id FROM c ORDER BY d LIMIT %s".encode(), params)).fetchall()
    return [r[0] for r in rows]


async def measure(rows_out: list[Row], size: int, label: str, methods: list[tuple[str, object, set[str] | None]],
                  corpus: Corpus, rows: int, sets: list[tuple[str, str | None, str | None, np.ndarray]]) -> None:
    """Every method on every query of every set, method after method on the same query, so a shared
    machine's drift hits them alike; `methods` are (name, search(vec, section), the sets it answers or
    None for all). One Row per method and set."""
    for name, section, _, qs in sets:
        mine = [(m, search) for m, search, only in methods if only is None or name in only]
        out = {m: Row(size, name, m) for m, _ in mine}
        for q in qs:
            for m, search in mine:
                started = time.perf_counter()
                got = await search(q, section)  # type: ignore[operator]
                out[m].times.append(time.perf_counter() - started)
                out[m].recalls.append(recall(corpus, rows, q, section, got))
        rows_out.extend(out.values())
        print(f"{size:,}: {label} {name} done", flush=True)


def query_sets(corpus: Corpus) -> list[tuple[str, str | None, str | None, np.ndarray]]:
    """(name, filter section, section the queries come from, queries)."""
    sets: list[tuple[str, str | None, str | None, np.ndarray]] = [
        ("unfiltered", None, None, queries(corpus, UNFILTERED_QUERIES, None, seed=1))]
    for n, section in enumerate(SECTIONS):
        sets.append((f"section {section}", section, section, queries(corpus, QUERIES_PER_SECTION, section, seed=10 + n)))
    # Questions about one thing asked of another section: the filter's rows are rare near the query.
    for n, section in enumerate(("Cause", "Operator_Note")):
        sets.append((f"section {section}, query from Task_Context", section, "Task_Context",
                     queries(corpus, QUERIES_PER_SECTION, "Task_Context", seed=30 + n)))
    return sets


async def one_size(admin_url: str, size: int) -> tuple[list[Row], dict]:
    corpus = generate(size + 2 * INSERT_ROWS, seed=size)
    name = f"retrieval_{size}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = admin_url.replace("/bamboo?", f"/{name}?")
    pool = await open_pool(url, DIM, "synthetic-clustered", max_size=2)
    facts: dict = {"size": size}
    out: list[Row] = []
    sets = query_sets(corpus)
    filtered = [s for s in sets if s[1]]
    try:
        defs, facts["load_s"] = await bulk_load(url, corpus, size)
        table_wide = {n: d for n, d in defs.items() if " WHERE " not in d}
        per_section = {n: d for n, d in defs.items() if " WHERE " in d}
        facts["build_table_wide_s"] = sum((await build(url, table_wide)).values())
        store = product.KnowledgeStore(pool)
        rows = size
        await exact(pool, sets[0][3][0], None)  # warm the cache for everyone alike
        unfiltered = {sets[0][0]}
        phase1: list[tuple[str, object, set[str] | None]] = [
            ("before issue 25", lambda v, s: previous.search(pool, v, K, s), None),
            ("exact scan", lambda v, s: exact(pool, v, s), None)]
        phase1 += [(f"table-wide index, ef_search {ef}", lambda v, s, ef=ef: hnsw(pool, v, s, ef), unfiltered)
                   for ef in EF_SWEEP]
        await measure(out, size, "phase 1", phase1, corpus, rows, sets)
        facts["insert_before_ms"] = await insert_cost(pool, corpus, rows)
        rows += INSERT_ROWS
        facts["build_sections_s"] = sum((await build(url, per_section)).values())
        async def now(v: np.ndarray, s: str | None) -> list[str]:
            return [h.graph_id for h in await store.search_passages(v.tolist(), k=K, section=s)]

        indexed = {name for name, section, _, _ in filtered if section in per_section_names(per_section)}
        phase2: list[tuple[str, object, set[str] | None]] = [("after issue 25 (search_passages)", now, None)]
        phase2 += [(f"section indexes, ef_search {ef}", lambda v, s, ef=ef: hnsw(pool, v, s, ef), indexed)
                   for ef in EF_SWEEP]
        await measure(out, size, "phase 2", phase2, corpus, rows, sets)
        facts["insert_after_ms"] = await insert_cost(pool, corpus, rows)
        async with pool.connection() as conn:
            sizes = await (await conn.execute(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
                "WHERE relname = 'passages' AND indexrelname LIKE 'passages_embedding%%'")).fetchall()
            facts["index_mb"] = {r[0]: r[1] / 2**20 for r in sizes}
            table = await (await conn.execute("SELECT pg_table_size('passages')")).fetchone()
            facts["table_mb"] = (table[0] if table else 0) / 2**20
            facts["section_rows"] = dict(await (await conn.execute(
                "SELECT section, count(*) FROM passages GROUP BY section ORDER BY 2 DESC")).fetchall())
    finally:
        await pool.close()
    return out, facts


def per_section_names(defs: dict[str, str]) -> set[str]:
    return {d.split("section = '", 1)[1].split("'", 1)[0] for d in defs.values()}


# ------------------------------------------------------------------ report
def report(rows: list[Row], facts: list[dict], args: list[str], version: str) -> str:
    lines = [
        "# Passage retrieval at scale (issue 25)",
        "",
        f"Command: `.venv/bin/python -m bench.retrieval.run{''.join(' ' + a for a in args)} --write` "
        f"(synthetic clustered passages, {DIM} dimensions, bulk loaded and indexed as the migrations define; "
        f"recall@{K} against exact search; latency per query from this process through the connection pool; "
        f"pgvector {version}; this machine: {psutil.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end; host {platform.machine()} {platform.python_version()}; "
        f"run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        "Before = the search at commit 9b423c1 (table-wide index, ef_search 40 unfiltered, 200 filtered then "
        "an exact scan when short); after = `search_passages` now (per-section indexes of migration 025, "
        f"ef_search {getattr(product, 'EF_SEARCH', 40)}, an exact scan for a section without an index of its own).",
        "",
        f"| passages | queries | method | queries | recall@{K} mean | min | queries < 1.0 | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r.size:,} | {r.queries} | {r.method} | {len(r.recalls)} | {np.mean(r.recalls):.3f} "
                     f"| {min(r.recalls):.1f} | {sum(x < 1.0 for x in r.recalls)} "
                     f"| {median(r.times) * 1000:.1f} | {percentile(r.times, 0.95) * 1000:.1f} |")
    lines += ["", "| passages | rows per section | COPY s | table-wide index build s | section indexes build s "
              "| table MB | index MB | insert ms/row, table-wide index only | insert ms/row, with section indexes |",
              "|---|---|---|---|---|---|---|---|---|"]
    for f in facts:
        per = ", ".join(f"{s} {n:,}" for s, n in f["section_rows"].items())
        idx = ", ".join(f"{n.removeprefix('passages_embedding') or '(table)'} {mb:.0f}" for n, mb in sorted(f["index_mb"].items()))
        lines.append(f"| {f['size']:,} | {per} | {f['load_s']:.1f} | {f['build_table_wide_s']:.1f} "
                     f"| {f['build_sections_s']:.1f} | {f['table_mb']:.0f} | {idx} | {f['insert_before_ms']:.2f} "
                     f"| {f['insert_after_ms']:.2f} |")
    largest = max(f["size"] for f in facts)
    after = [r for r in rows if r.size == largest and r.method.startswith("after")]
    worst = min(after, key=lambda r: np.mean(r.recalls))
    met = all(np.mean(r.recalls) >= TARGET_RECALL for r in after)
    lines += ["", f"Target: recall@{K} ≥ {TARGET_RECALL} at {largest:,} passages, filtered and unfiltered (after): "
              f"lowest mean {np.mean(worst.recalls):.3f} ({worst.queries}) → {'MET' if met else 'NOT met'}."]
    return "\n".join(lines) + "\n"


async def main(sizes: list[int], args: list[str], write: bool) -> None:
    base = Path(tempfile.mkdtemp(prefix="bamboo-bench-retrieval-"))
    pgdata = base / "pg"
    _, admin_url = start_postgres(pgdata)
    rows: list[Row] = []
    facts: list[dict] = []
    try:
        for size in sizes:
            r, f = await one_size(admin_url, size)
            rows += r
            facts.append(f)
        with psycopg.connect(admin_url.replace("/bamboo?", f"/retrieval_{sizes[0]}?")) as conn:
            found = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            version = found[0] if found else "?"
    finally:
        stop_postgres(pgdata)
        if not os.environ.get("BAMBOO_BENCH_KEEP"):
            shutil.rmtree(base, ignore_errors=True)
    text = report(rows, facts, args, version)
    print(text)
    if write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                    help="passages per database, comma-separated (default 10000,100000)")
    ap.add_argument("--write", action="store_true", help=f"store the output in {RESULTS.relative_to(ROOT)}")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    extra = [f"--sizes {a.sizes}"] if sizes != DEFAULT_SIZES else []
    sys.exit(asyncio.run(main(sizes, extra, a.write)))
