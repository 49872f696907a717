"""Real MCP servers for the tests: the tiny Streamable HTTP server in this folder, and mcp-server-time."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bamboo.panda.simulator import PandaSimulator
from tests.panda.incidents import write_incidents

HTTP_SERVER = Path(__file__).with_name("http_server.py")
TIME_SERVER = str(Path(sys.executable).with_name("mcp-server-time"))


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server() -> RunningServer:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(HTTP_SERVER), str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("test MCP HTTP server exited during start-up")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return RunningServer(process, f"http://127.0.0.1:{port}/mcp")
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("test MCP HTTP server did not start within 20s")


@pytest.fixture(scope="session")
def http_server() -> Iterator[RunningServer]:
    server = start_http_server()
    yield server
    server.stop()


@pytest.fixture
def disposable_http_server() -> Iterator[RunningServer]:
    """A server of its own, for tests that kill it."""
    server = start_http_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def panda_simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PandaSimulator]:
    with PandaSimulator(write_incidents(tmp_path_factory.mktemp("incidents"))) as sim:
        yield sim
