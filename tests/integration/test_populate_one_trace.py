"""`bamboo populate` traced to the console exporter is one trace: the command's root span and every client call
it makes under it, its progress polls as events on that span instead of a root span each (they were 91% of the
spans of a long populate, every one its own trace)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.integration.helpers import write_incidents
from tests.services import ROOT, worker_env


def console_spans(path: Path) -> list[dict]:
    """The spans the console exporter wrote: one JSON object after another."""
    text, spans, at = path.read_text(), [], 0
    decoder = json.JSONDecoder()
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return spans
        span, at = decoder.raw_decode(text, at)
        spans.append(span)


async def test_bamboo_populate_is_one_trace_with_its_polls_as_events(settings, running_worker, llm_server, tmp_path):
    d = tmp_path / "incidents"
    write_incidents(d, 4, prefix="traced", first_task=43000000)
    env = {**worker_env(settings), "BAMBOO_OTEL_EXPORTER": "console", "BAMBOO_DATA_DIR": str(tmp_path / "cli-data"),
           "COLUMNS": "300"}
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "populate", str(d),
                                                    "--batch-id", "traced"],
                                   cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "4 stored" in done.stdout, done.stdout

    spans = console_spans(tmp_path / "cli-data" / "logs" / "bamboo-client-spans.log")
    assert len({s["context"]["trace_id"] for s in spans}) == 1, [s["name"] for s in spans]
    [root] = [s for s in spans if s["parent_id"] is None]
    assert root["name"] == "bamboo populate" and root["attributes"]["bamboo.exit_code"] == 0
    assert "StartWorkflow:PopulateBatch" in [s["name"] for s in spans]
    assert not [s for s in spans if s["name"].startswith("QueryWorkflow:")]  # the polls made no span
    assert root["attributes"]["bamboo.progress_polls"] >= 1
    events = [e["name"] for e in root["events"]]
    assert "batch.progress" in events and events[-1] == "batch.result", events
