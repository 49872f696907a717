"""Fixtures for the console tests: the investigation fixtures, the console's own front-end key registered
in the test's database, local accounts, the console as the `bamboo console` process, and a real browser.

The console runs exactly as a deployment runs it (its own process, its own Temporal client and database
pool, the production signing path); the worker runs in the test's process against the same services.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bamboo.approvals.keys import KeyStore
from bamboo.devstack.ports import free_port
from bamboo.frontends.console.accounts import LocalAccounts
from policy.approvers import Role
from tests.investigation.conftest import (  # noqa: F401 — fixtures shared with the investigation tests
    brain, keys_dir, new_kills, ops, settings, sim, terminate_sessions,
)
from tests.services import ROOT, worker_env
from tests.support.browser import CHROMIUM_MISSING, Browser

CONSOLE_IDENTITY = "test-console"
PASSWORD = "correct horse battery"
# Console accounts: every registered test identity, plus one whose identity the deployment never registered.
ACCOUNTS = ("alice", "bob", "carol", "reader", "outsider")
SHOTS_ENV = "BAMBOO_CONSOLE_SCREENSHOTS"


@dataclass
class ConsoleServer:
    url: str
    proc: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
async def console_key(stack, services, keys_dir):
    """The console's key, registered as a front end in this test's registry, and each test account bound to
    its identity by the suite's pinned administrator."""
    store = KeyStore(keys_dir)
    key = store.load(CONSOLE_IDENTITY) if store.exists(CONSOLE_IDENTITY) else store.create(CONSOLE_IDENTITY)
    registry = stack.registry(services.store)
    await registry.register(stack.admin, CONSOLE_IDENTITY, key.public_key, {Role.FRONT_END})
    for name in ACCOUNTS:
        await registry.bind(stack.admin, CONSOLE_IDENTITY, name, name)
    return key


@pytest.fixture(scope="session")
def accounts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("console") / "users.json"
    accounts = LocalAccounts(path)
    for name in ACCOUNTS:
        accounts.add(name, PASSWORD)
    return path


def console_env(settings, accounts_file: Path, data_dir: Path, **extra: str) -> dict[str, str]:
    env = worker_env(settings)
    env.update({
        "BAMBOO_DATA_DIR": str(data_dir), "BAMBOO_CONSOLE_IDENTITY": CONSOLE_IDENTITY,
        "BAMBOO_CONSOLE_USERS_FILE": str(accounts_file), "BAMBOO_CONSOLE_SECRET_KEY": "test-cookie-secret-" + "x" * 24,
        "BAMBOO_CONSOLE_REFRESH_S": "1",
    })
    env.update(extra)
    return env


def start_console(env: dict[str, str], log: Path, timeout: float = 60.0) -> ConsoleServer:
    port = free_port()
    env = {**env, "BAMBOO_CONSOLE_PORT": str(port), "BAMBOO_CONSOLE_PUBLIC_URL": f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen([sys.executable, "-m", "bamboo.cli.main", "console"], cwd=ROOT, env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the console exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return ConsoleServer(url, proc, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the console did not answer within {timeout} s:\n{log.read_text(errors='replace')}")


def stop_console(server: ConsoleServer) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(15)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(5)


@pytest.fixture
def console_factory(settings, accounts_file, console_key, ops, tmp_path):
    """Start consoles with extra environment; each is stopped at the end of the test."""
    started: list[ConsoleServer] = []

    def make(**extra: str) -> ConsoleServer:
        server = start_console(console_env(settings, accounts_file, tmp_path, **extra),
                               tmp_path / f"console-{len(started)}.log")
        started.append(server)
        return server

    yield make
    for server in started:
        stop_console(server)


@pytest.fixture
def console(console_factory) -> ConsoleServer:
    return console_factory()


@pytest.fixture
def browsers(console, tmp_path):
    """Real browsers on the console (one per person); screenshots go to $BAMBOO_CONSOLE_SCREENSHOTS if set."""
    if CHROMIUM_MISSING:
        pytest.skip(CHROMIUM_MISSING)
    shots = Path(os.environ[SHOTS_ENV]) if os.environ.get(SHOTS_ENV) else tmp_path / "shots"
    opened: list[Browser] = []

    def make() -> Browser:
        browser = Browser(console.url, shots)
        opened.append(browser)
        return browser

    yield make
    for browser in opened:
        browser.quit()


async def sign_in(browser: Browser, name: str, password: str = PASSWORD) -> None:
    await browser.get("/login")
    await browser.fill("#username", name)
    await browser.fill("#password", password)
    await browser.click("#sign-in")
    await browser.wait_text(f"signed in as {name}", "#who")


class ConsoleClient:
    """The console over plain HTTP, as a person's browser speaks to it (cookies, CSRF token from the page)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, follow_redirects=False, timeout=60)

    def csrf(self, path: str = "/login") -> str:
        import re

        page = self.http.get(path, follow_redirects=True).text
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found, page[:2000]
        return found.group(1)

    def sign_in(self, name: str, password: str = PASSWORD) -> httpx.Response:
        token = self.csrf("/login")
        return self.http.post("/login", data={"csrf": token, "username": name, "password": password, "next": "/"})

    def page(self, path: str) -> httpx.Response:
        return self.http.get(path, follow_redirects=True)

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def http_clients(console):
    made: list[ConsoleClient] = []

    def make() -> ConsoleClient:
        client = ConsoleClient(console.url)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def screenshots_requested() -> bool:
    return bool(os.environ.get(SHOTS_ENV))

