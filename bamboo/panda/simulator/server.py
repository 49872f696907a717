"""Run the simulator in a background thread (tests, the demo) or in the foreground (``bamboo panda-sim``).

Example (a pytest fixture or the demo)::

    with PandaSimulator(Path("examples/incidents")) as sim:
        client = PandaClient(sim.api_url, sim.monitor_url)

The official client works against it as against the real server: ``PANDA_URL`` and ``PANDA_URL_SSL`` set
to ``sim.url``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import uvicorn

from bamboo.panda.simulator.app import SimAuth, SimulatorState, build_app
from bamboo.panda.simulator.contract_seed import TEST_DN
from bamboo.panda.simulator.protocol import Caller
from bamboo.panda.simulator.world import FIXTURES_DIR, World, build_world

STARTUP_TIMEOUT_S = 15.0
DEFAULT_JEDI_DELAY_S = 5.0


def sim_auth(*, require_token: str | None = None, production_role: bool = False) -> SimAuth:
    """The test identity, by client certificate or (``require_token``) by that bearer token only; with the
    production role when its DN is listed as a production DN, never because of who else might call."""
    production_dns = (TEST_DN,) if production_role else ()
    if require_token:
        return SimAuth(default_dn=None, tokens={require_token: TEST_DN}, production_dns=production_dns)
    return SimAuth(default_dn=TEST_DN, production_dns=production_dns)


class PandaSimulator:
    """A real HTTP server on loopback; ``port=0`` picks a free port (read it back from ``.port``).

    The world comes from ``incidents_dir`` or is given whole (``world=``, e.g. the contract seed).
    ``require_token`` makes the simulator accept only that OIDC bearer token (with an ``Origin`` VO) and no
    client certificate; ``auth`` describes authentication fully. ``jedi_delay_s`` is how long a registered
    kill or retry waits before JEDI applies it.

    Roles go by the caller's identity, as on the real server: the test identity (``bamboo tester``) is a
    plain user, who may kill or retry only its own tasks and may not pause, resume or reactivate any.
    ``production_role=True`` lists that identity among the server's production DNs (``production_dns`` in
    the server's config), so it may act on every task, as a shifter does; another identity (``X-Test-DN``)
    stays a plain user. Left unset, an incident world keeps the production role for the in-process callers
    written before roles (the demo's own simulator and the suites that approve kills of other users'
    tasks), and a given world has none; ``bamboo panda-sim`` always says which.
    """

    def __init__(
        self,
        incidents_dir: Path | None = None,
        *,
        world: World | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        fixtures_dir: Path = FIXTURES_DIR,
        require_token: str | None = None,
        auth: SimAuth | None = None,
        jedi_delay_s: float = DEFAULT_JEDI_DELAY_S,
        production_role: bool | None = None,
    ) -> None:
        if production_role is None:
            production_role = world is None
        if world is None:
            if incidents_dir is None:
                raise ValueError("give the simulator an incidents directory or a world")
            world = build_world(Path(incidents_dir), fixtures_dir)
        if auth is None:
            auth = sim_auth(require_token=require_token, production_role=production_role)
        self.world: World = world
        self.state = SimulatorState(self.world, auth, jedi_delay_s)
        self.host = host
        config = uvicorn.Config(build_app(self.state), host=host, port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self.port = port

    @property
    def production_role(self) -> bool:
        """Whether the test identity holds the production role here."""
        return Caller(dn=TEST_DN, production_dns=self.state.auth.production_dns).production

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v1"

    @property
    def monitor_url(self) -> str:
        return self.base_url

    @property
    def url(self) -> str:
        """What the official client's PANDA_URL / PANDA_URL_SSL take (it derives ``/api/v1`` from the host)."""
        return f"{self.base_url}/server/panda"

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
