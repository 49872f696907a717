"""Tool-layer benchmark: tool-block rendering and selection latency (25, 200, 1000 tools), recall@k of
selection on the labelled cases, and call round-trips (built-in via the PanDA simulator, stdio
mcp-server-time, Streamable HTTP test server).

    .venv/bin/python -m bench.tools.bench_tools [--quick]

Prints a report and writes it to bench/tools/results.md. Figures are for comparison within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bamboo.mcp.config import McpServerConfig
from bamboo.mcp.external import ExternalMcpClient, StdioMcpClient
from bamboo.panda.client import PandaClient
from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.toolbox import PandaToolbox
from bamboo.tools.selection import SelectionConfig, ToolSelector, fill_block, offline_token_counter
from bamboo.tools.vector_index import MemoryVectorIndex
from bench.tools.cases import CASES, catalogue

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("results.md")
PROMPT = "You investigate PanDA task failures.\nTask: {task}\nAvailable tools:\n{tools}\nWrite Python that calls the tools."
SIZES = (25, 200, 1000)
KS = (3, 5, 10)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def median_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def amedian_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def make_embedder() -> tuple[Any, str]:
    try:
        from bamboo.embeddings.local import LocalMiniLMEmbedder

        return LocalMiniLMEmbedder(), "all-MiniLM-L6-v2 (local ONNX)"
    except Exception as exc:  # the bench still measures rendering and round-trips without it
        from tests.tools.support import HashingEmbedder

        return HashingEmbedder(384), f"hashing embedder (MiniLM unavailable: {exc})"


async def bench_selection(embedder: Any, repeat: int) -> list[str]:
    count = offline_token_counter()
    prompt = PROMPT.replace("{task}", "jediTaskID 40112233, status broken")
    lines = ["| tools | render all full (ms) | block tokens | select cold (ms) | select warm (ms) | full / compact / omitted |",
             "|---:|---:|---:|---:|---:|---|"]
    config = SelectionConfig(context_window=8192, budget_margin=1024, max_full_schemas=25)
    huge = SelectionConfig(context_window=10_000_000, budget_margin=0)
    for size in SIZES:
        tools = catalogue(size)
        names = {t.name for t in tools}
        render = median_time(lambda: fill_block(prompt, tools, names, huge, count, "all"), repeat)
        tokens = fill_block(prompt, tools, names, huge, count, "all").prompt_tokens
        selector = ToolSelector(MemoryVectorIndex(), embedder, f"bench-{size}", config, count)
        start = time.perf_counter()
        block = await selector.select(prompt, CASES[0][0], tools)
        cold = time.perf_counter() - start
        warm = await amedian_time(lambda: selector.select(prompt, CASES[1][0], tools), repeat)
        lines.append(f"| {size} | {ms(render)} | {tokens} | {ms(cold)} | {ms(warm)} | "
                     f"{len(block.full)} / {len(block.compact)} / {len(block.omitted)} ({block.mode}) |")
    return lines


async def recall(embedder: Any, size: int, with_history: bool) -> dict[int, float]:
    """Share of expected tools found in the top k. With history, the other cases of the same category
    are indexed as approved past runs (leave-one-out), as a deployment would have learned them."""
    tools = catalogue(size)
    hits = {k: 0 for k in KS}
    total = 0
    config = SelectionConfig(max_full_schemas=25, reserved_explore=4)
    base = ToolSelector(MemoryVectorIndex(), embedder, f"recall-{size}", config)
    await base.ensure_indexed(tools)
    for i, (symptom, expected, category) in enumerate(CASES):
        selector = base
        if with_history:
            # A namespace per case holds the same tool vectors plus only the other cases' runs.
            selector = ToolSelector(base.index, embedder, f"recall-{size}-{i}", config)
            await _copy_tools(base, selector)
            for j, (other, tools_used, other_category) in enumerate(CASES):
                if j != i and other_category == category:
                    await selector.record_approved_run(other, tools_used, ended_in_cause=True)
        order = await selector.rank(symptom, tools)
        total += len(expected)
        for k in KS:
            hits[k] += len(set(expected) & set(order[:k]))
    return {k: hits[k] / total for k in KS}


async def _copy_tools(source: ToolSelector, target: ToolSelector) -> None:
    index = source.index
    assert isinstance(index, MemoryVectorIndex)
    items = list(index._items.get((source.namespace, "tool_catalogue"), {}).values())
    await index.upsert(target.namespace, "tool_catalogue", items)
    target._indexed = dict(source._indexed)  # the copied vectors are current: do not embed them again


async def bench_recall(embedder: Any) -> list[str]:
    lines = ["| tools | history | " + " | ".join(f"recall@{k}" for k in KS) + " |",
             "|---:|---|" + "---:|" * len(KS)]
    for size in SIZES:
        for with_history in (False, True):
            r = await recall(embedder, size, with_history)
            label = "descriptions + past runs" if with_history else "descriptions only"
            lines.append(f"| {size} | {label} | " + " | ".join(f"{r[k]:.2f}" for k in KS) + " |")
    return lines


async def bench_round_trips(calls: int) -> list[str]:
    time_server = str(Path(sys.executable).with_name("mcp-server-time"))
    port = _free_port()
    http = subprocess.Popen([sys.executable, str(ROOT / "tests" / "mcp" / "http_server.py"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with tempfile.TemporaryDirectory() as incidents, PandaSimulator(_incidents_dir(Path(incidents))) as sim:
            async with PandaClient(sim.api_url, sim.monitor_url) as client:
                toolbox = PandaToolbox(client)
                builtin = await amedian_time(lambda: toolbox.call_tool("get_task_details", {"task_id": 40112233}), calls)
            stdio = StdioMcpClient(McpServerConfig(name="time", command=time_server))
            start = time.perf_counter()
            await stdio.connect()
            stdio_connect = time.perf_counter() - start
            stdio_call = await amedian_time(lambda: stdio.call_tool("get_current_time", {"timezone": "UTC"}), calls)
            await stdio.close()
            web = ExternalMcpClient(McpServerConfig(name="web", url=f"http://127.0.0.1:{port}/mcp"))
            start = time.perf_counter()
            for _ in range(100):
                if (await web.connect()).reachable:
                    break
                await web.close()
                await asyncio.sleep(0.1)
                start = time.perf_counter()
            http_connect = time.perf_counter() - start
            http_call = await amedian_time(lambda: web.call_tool("echo", {"text": "ping"}), calls)
            await web.close()
    finally:
        http.kill()
        http.wait()
    return [
        "| path | connect (ms) | median call (ms) | vs built-in |",
        "|---|---:|---:|---:|",
        f"| built-in PanDA tool over HTTP to the simulator | - | {ms(builtin)} | 1.0x |",
        f"| stdio MCP (mcp-server-time, get_current_time) | {ms(stdio_connect)} | {ms(stdio_call)} | {stdio_call / builtin:.1f}x |",
        f"| Streamable HTTP MCP (test server, echo) | {ms(http_connect)} | {ms(http_call)} | {http_call / builtin:.1f}x |",
    ]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _incidents_dir(tmp: Path) -> Path:
    examples = ROOT / "examples" / "incidents"
    if any(examples.glob("*.json")):
        return examples
    import json

    (tmp / "one.json").write_text(json.dumps({"incident_id": "bench", "task_data": {
        "jediTaskID": 40112233, "status": "broken", "errorDialog": "pilot:1212 Payload ran out of memory"}}))
    return tmp


async def main(quick: bool) -> str:
    repeat, calls = (3, 20) if quick else (10, 100)
    embedder, embedder_name = make_embedder()
    await embedder.embed(["warm-up"])
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    sections = [
        "# Tool layer benchmark",
        "",
        f"Command: `.venv/bin/python -m bench.tools.bench_tools{' --quick' if quick else ''}`  ",
        f"Run: {started} on {platform.machine()} with {_cpus()} CPUs (shared with other work), Python {platform.python_version()}.  ",
        f"Embedder: {embedder_name}. Token counts: the offline MiniLM WordPiece tokenizer.",
        "",
        "## Tool block rendering and selection latency",
        "",
        "`render all full` renders every tool with its schema against the assembled prompt (no budget). "
        "`select` uses an 8192-token window, 1024 margin, 25 full schemas; `cold` includes embedding and "
        f"indexing the whole catalogue, `warm` is a later turn (query embedding, two searches, render). Median of {repeat}.",
        "",
        *await bench_selection(embedder, repeat),
        "",
        f"## Recall of selection on {len(CASES)} labelled symptom -> tools cases",
        "",
        "Share of the expected tools that rank in the top k. `past runs` indexes the other cases of the "
        "same category as approved runs that ended in a cause (leave-one-out).",
        "",
        *await bench_recall(embedder),
        "",
        f"## Call round-trip (median of {calls} calls)",
        "",
        *await bench_round_trips(calls),
        "",
    ]
    return "\n".join(sections)


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    report = asyncio.run(main(parser.parse_args().quick))
    print(report)
    RESULTS.write_text(report)
