"""Run the simulator in a background thread (tests, the demo) or in the foreground (``bamboo panda-sim``).

Example (a pytest fixture or the demo)::

    with PandaSimulator(Path("examples/incidents")) as sim:
        client = PandaClient(sim.api_url, sim.monitor_url)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import uvicorn

from bamboo.panda.simulator.app import SimulatorState, build_app
from bamboo.panda.simulator.world import FIXTURES_DIR, World, build_world

STARTUP_TIMEOUT_S = 15.0


class PandaSimulator:
    """A real HTTP server on loopback; ``port=0`` picks a free port (read it back from ``.port``)."""

    def __init__(
        self,
        incidents_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        fixtures_dir: Path = FIXTURES_DIR,
        require_token: str | None = None,
    ) -> None:
        self.world: World = build_world(Path(incidents_dir), fixtures_dir)
        self.state = SimulatorState(self.world, require_token=require_token)
        self.host = host
        config = uvicorn.Config(build_app(self.state), host=host, port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self.port = port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v1"

    @property
    def monitor_url(self) -> str:
        return self.base_url

    def start(self) -> "PandaSimulator":
        self._thread = threading.Thread(target=self._server.run, name="panda-sim", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"PanDA simulator failed to start on {self.host}:{self.port}")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def wait(self) -> None:
        """Block until the server stops (the CLI command); Ctrl-C raises KeyboardInterrupt here."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def __enter__(self) -> "PandaSimulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
