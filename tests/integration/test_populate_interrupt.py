"""Ctrl-C on `bamboo populate` detaches, as its help says: the command says the batch goes on and how to
re-attach, and the batch finishes without it, through a pipe and in a terminal (the live bar)."""

from __future__ import annotations

import asyncio
import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bamboo.accumulation.contract import PopulateResult, batch_workflow_id
from tests.integration.helpers import write_incidents
from tests.services import ROOT, worker_env


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
async def test_ctrl_c_detaches_says_how_to_reattach_and_the_batch_goes_on(settings, client, running_worker,
                                                                          llm_server, tmp_path: Path,
                                                                          terminal: bool) -> None:
    d = write_incidents(tmp_path / "incidents", 6, prefix=f"int-{terminal}", first_task=43000000)
    llm_server.latency_s = 0.5  # long enough that the batch is still running when Ctrl-C arrives
    reader, writer = pty.openpty() if terminal else os.pipe()  # a terminal shows the live bar, a pipe plain lines
    proc = subprocess.Popen([sys.executable, "-m", "bamboo.cli.main", "populate", str(d), "--concurrency", "1",
                             "--batch-id", f"interrupted-{terminal}"], cwd=ROOT, env={**worker_env(settings), "COLUMNS": "120"},
                            stdout=writer, stderr=writer)
    os.close(writer)
    chunks: list[bytes] = []
    drain = asyncio.create_task(asyncio.to_thread(_drain, reader, chunks))
    deadline = time.monotonic() + 120
    while llm_server.call_count == 0:  # the batch runs: the command is following it
        assert proc.poll() is None and time.monotonic() < deadline, b"".join(chunks).decode(errors="replace")
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    code = await asyncio.to_thread(proc.wait, 60)
    await asyncio.wait_for(drain, 10)
    said = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))  # the bar's colours
    assert code == 0, said
    assert "Detached" in said and f"bamboo populate --attach interrupted-{terminal}" in said, said

    handle = client.get_workflow_handle(batch_workflow_id(f"interrupted-{terminal}"), result_type=PopulateResult)
    result = await asyncio.wait_for(handle.result(), 180)
    assert (result.done, result.failed) == (6, 0)


def _drain(fd: int, chunks: list[bytes]) -> None:
    """Read the command's output until it closes (EIO is a terminal's end of file)."""
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        pass
    finally:
        os.close(fd)
