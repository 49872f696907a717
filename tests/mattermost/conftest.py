"""Fixtures for the bot tests: the investigation fixtures, the Mattermost stand-in with a channel of people,
the bot's front-end key registered in the test's database, the deployment's user mapping, and the bot as the
`bamboo serve-mattermost` process (its production client, pointed at the stand-in on loopback)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from mattermostdriver import Driver

from bamboo.approvals.keys import KeyStore
from policy.approvers import Role
from tests.investigation.conftest import (  # noqa: F401 — fixtures shared with the investigation tests
    brain, keys_dir, new_kills, ops, settings, sim, terminate_sessions,
)
from tests.mattermost.standin import MattermostStandIn, User
from tests.services import ROOT, worker_env

BOT_IDENTITY = "test-mattermost-bot"


@dataclass
class Room:
    """The stand-in, its channel, and each person's own Mattermost client."""

    standin: MattermostStandIn
    channel_id: str
    people: dict[str, User]
    bot_user: User

    def client(self, name: str) -> Driver:
        driver = Driver({"url": "127.0.0.1", "port": self.standin.port, "scheme": "http",
                         "token": self.people[name].token})
        driver.login()
        return driver

    async def say(self, name: str, message: str, root_id: str = "") -> dict:
        driver = self.client(name)
        return await asyncio.to_thread(driver.posts.create_post,
                                       {"channel_id": self.channel_id, "message": message, "root_id": root_id})


@pytest.fixture
async def bot_key(stack, services, keys_dir):
    store = KeyStore(keys_dir)
    key = store.load(BOT_IDENTITY) if store.exists(BOT_IDENTITY) else store.create(BOT_IDENTITY)
    await stack.registry(services.store).register(stack.admin, BOT_IDENTITY, key.public_key, {Role.FRONT_END},
                                                  speaks_for=["alice", "bob"])
    return key


@pytest.fixture
def room(settings, ops, bot_key, tmp_path):
    """alice and bob are mapped to their registered identities; mallory is in the channel but not mapped."""
    with MattermostStandIn() as standin:
        people = {name: standin.add_user(name) for name in ("alice", "bob", "mallory")}
        bot_user = standin.add_user("bamboo")
        channel = standin.add_channel("ops", bot_user, *people.values())
        mapping = tmp_path / "mattermost-users.json"
        mapping.write_text(json.dumps({"users": {people["alice"].id: "alice", people["bob"].id: "bob"}}))
        env = worker_env(settings)
        env.update({"BAMBOO_DATA_DIR": str(tmp_path), "BAMBOO_MATTERMOST_URL": standin.url,
                    "BAMBOO_MATTERMOST_TOKEN": bot_user.token, "BAMBOO_MATTERMOST_USERS_FILE": str(mapping),
                    "BAMBOO_MATTERMOST_IDENTITY": BOT_IDENTITY, "BAMBOO_MATTERMOST_POLL_S": "0.3",
                    "BAMBOO_PANDA_API_URL": settings.panda_api_url, "BAMBOO_PANDA_MONITOR_URL": settings.panda_monitor_url})
        log = tmp_path / "bot.log"
        proc = subprocess.Popen([sys.executable, "-m", "bamboo.cli.main", "serve-mattermost"], cwd=ROOT, env=env,
                                stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while "Mattermost bot on" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"the bot did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.2)
        time.sleep(1.0)  # its websocket authenticates right after the banner
        try:
            yield Room(standin, channel.id, people, bot_user)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
            Path(log).read_text(errors="replace")
