"""The contract tier: one set of tests, run against the simulator and against the real PanDA server.

``target`` is parametrised over both. The real server is started once per session from the recipe
beside the repository (``../shared/panda-server``, or ``BAMBOO_PANDA_SERVER_RECIPE``); where the recipe is
missing, its half of the tier is skipped and the run's summary says so and why. The simulator serves the
same seed data (``contract_seed``) with the same test identity and refusal rules. Before every test both
go back to the seed, so tests do not see each other's commands.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from bamboo.panda.simulator import PandaSimulator
from bamboo.panda.simulator.app import SimAuth
from bamboo.panda.simulator.contract_seed import TEST_DN, contract_world
from tests.contract.oidc_issuer import OidcIssuer
from tests.contract.panda_server import RecipeMissing, check_recipe, recipe_dir, running_real_server

VO = "atlas"
# Commands stay registered on the simulator as on the real server (which has no JEDI daemon);
# tests of JEDI's asynchrony start a simulator of their own with a short delay.
CONTRACT_JEDI_DELAY_S = 3600.0
TIER: dict = {"real": None, "skipped": None, "started": None, "finished": None, "tests": 0}


@dataclass
class Target:
    """A PanDA server under test, seen only through HTTP plus the few probes a test needs."""

    name: str
    base_url: str
    token: str  # a bearer token this server accepts for the test identity (VO atlas)
    reset: Callable[[], None]
    commands: Callable[[int], list[str]]  # the commands registered for a task (JEDI's command table)
    set_status: Callable[[int, str], None]  # put a task in a status the seed does not have
    extra: dict = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v1"

    @property
    def url(self) -> str:
        """PANDA_URL / PANDA_URL_SSL for the official client."""
        return f"{self.base_url}/server/panda"

    @property
    def is_real(self) -> bool:
        return self.name == "real"


@pytest.fixture(scope="session")
def oidc_issuer():
    with OidcIssuer() as issuer:
        yield issuer


@pytest.fixture(scope="session")
def test_token(oidc_issuer: OidcIssuer) -> str:
    return oidc_issuer.mint("bamboo tester", [VO])


@pytest.fixture(scope="session")
def real_server(oidc_issuer: OidcIssuer):
    """The real PanDA server 1.0.4 with Postgres, token auth through the session's issuer; skipped, with
    the reason, where the recipe is not on this machine."""
    recipe = recipe_dir()
    try:
        check_recipe(recipe)
    except RecipeMissing as exc:
        TIER["skipped"] = str(exc)
        pytest.skip(f"real PanDA server tier skipped: {exc}")
    with running_real_server(recipe, oidc=oidc_issuer.auth_config(VO)) as server:
        TIER["real"] = dict(server.timings)
        yield server


@pytest.fixture(scope="session")
def sim_server(test_token: str):
    auth = SimAuth(default_dn=TEST_DN, tokens={test_token: TEST_DN}, vos=(VO,))
    with PandaSimulator(world=contract_world(), auth=auth, jedi_delay_s=CONTRACT_JEDI_DELAY_S) as sim:
        yield sim


@pytest.fixture(params=["simulator", "real"])
def target(request: pytest.FixtureRequest, test_token: str) -> Target:
    if request.param == "simulator":
        sim: PandaSimulator = request.getfixturevalue("sim_server")
        def set_status(tid: int, status: str) -> None:
            with sim.state.lock:
                sim.world.tasks[tid]["status"] = status

        target = Target("simulator", sim.base_url, test_token, lambda: sim.state.reset(contract_world()),
                        lambda tid: [r["comm_cmd"] for r in sim.state.jedi.table() if r["comm_task"] == tid],
                        set_status, {"sim": sim})
    else:
        server = request.getfixturevalue("real_server")
        target = Target("real", server.base_url, test_token, server.reseed,
                        lambda tid: [cmd for _, cmd in server.commands(tid)],
                        lambda tid, status: server.psql(
                            f"UPDATE doma_panda.jedi_tasks SET status = '{status}' WHERE jeditaskid = {int(tid)}"),
                        {"server": server})
    target.reset()
    return target


def official_client_env(target: Target, **extra: str) -> dict[str, str]:
    """The environment the official client reads at import: where PanDA is, and no DNS load balancing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PANDA", "BAMBOO_", "X509", "OIDC"))}
    env.update({"PANDA_URL": target.url, "PANDA_URL_SSL": target.url, "PANDACACHE_URL": target.url,
                "PANDA_BEHIND_REAL_LB": "1", "PANDA_VERIFY_HOST": "off", **extra})
    return env


@pytest.fixture(autouse=True)
def _time_the_real_tier(request: pytest.FixtureRequest):
    """Wall time of the tests that use the real server (for the summary line and CI budgeting)."""
    uses_real = "real_server" in request.fixturenames or getattr(request.node, "callspec", None) is not None and \
        request.node.callspec.params.get("target") == "real"
    if uses_real:
        TIER["started"] = TIER["started"] or time.monotonic()
    yield
    if uses_real:
        TIER["finished"] = time.monotonic()
        TIER["tests"] += 1


def pytest_terminal_summary(terminalreporter) -> None:
    """Say plainly whether the real-server tier ran, how long it took, or why it was skipped."""
    if TIER["skipped"]:
        terminalreporter.write_line(f"real PanDA server tier: SKIPPED ({TIER['skipped']})", yellow=True)
    elif TIER["real"]:
        t = TIER["real"]
        ran = (TIER["finished"] or 0) - (TIER["started"] or 0)
        terminalreporter.write_line(
            f"real PanDA server tier: ran {TIER['tests']} tests in {ran:.1f} s; fixture set-up {t['total_s']:.1f} s "
            f"(venv {t['venv_s']:.1f} s{' built' if t['venv_built'] else ' cached'}, Postgres + schema + seed "
            f"{t['postgres_schema_seed_s']:.1f} s, server start {t['server_start_s']:.1f} s)", green=True)


def get_json(target: Target, path: str, *, headers: dict | None = None, **params) -> httpx.Response:
    return httpx.get(f"{target.api_url}/{path}", params=params, headers={"Accept": "application/json", **(headers or {})},
                     timeout=30)


def post_json(target: Target, path: str, body: dict, *, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{target.api_url}/{path}", json=body, headers={"Accept": "application/json", **(headers or {})},
                      timeout=30)


ROOT = Path(__file__).resolve().parents[2]
