"""Real services for the integration tests: a Temporal dev server and an embedded Postgres, started
with the same code `bamboo dev up` uses, on free ports and in temporary directories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bamboo.approvals.admin import PinnedAdmins, pin
from bamboo.approvals.keys import KeyStore, LocalKey
from bamboo.approvals.registry import ApproverRegistry
from bamboo.devstack.ports import free_port
from bamboo.devstack.postgres import start_postgres, stop_postgres
from bamboo.devstack.temporal_server import start_temporal
from bamboo.settings import Settings
from policy.signing import DEFAULT_DEPLOYMENT

ROOT = Path(__file__).resolve().parents[1]


TEST_ADMIN = "test-admin"


def pinned_test_admin(base: Path) -> tuple[LocalKey, Path]:
    """The suite's administrator: a key of its own and the admin keys file that pins it, as a deployment
    pins its administrators (the tests run as a deployment with its own database, not the demo)."""
    key = KeyStore(base / "admin-key").create(TEST_ADMIN, overwrite=True)
    path = base / "admin-keys"
    path.unlink(missing_ok=True)
    pin(path, key.identity, key.public_key)
    return key, path


@dataclass
class TestStack:
    temporal_address: str
    admin_url: str
    pgdata: Path
    temporal_proc: subprocess.Popen
    admin: LocalKey
    admin_keys_file: Path

    def registry(self, store, deployment: str = DEFAULT_DEPLOYMENT) -> ApproverRegistry:
        """The approver registry of ``store`` for ``deployment``, judged against the suite's pinned administrator (a
        registration counts in the deployment it was signed for only)."""
        return ApproverRegistry(store.pool, store.audit,
                                PinnedAdmins(self.admin_keys_file, own_deployment=True, deployment=deployment))

    def new_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.admin_url.replace("/bamboo?", f"/{name}?")

    def settings(self, database_url: str, llm_url: str, **extra) -> Settings:
        extra.setdefault("admin_keys_file", self.admin_keys_file)
        extra.setdefault("deployment", DEFAULT_DEPLOYMENT)
        return Settings(
            _env_file=None, temporal_address=self.temporal_address, database_url=database_url,
            llm_base_url=llm_url, embedding_base_url=llm_url, embedding_model="scripted-embedding",
            **extra,
        )

    def stop(self) -> None:
        self.temporal_proc.send_signal(signal.SIGTERM)
        try:
            self.temporal_proc.wait(10)
        except subprocess.TimeoutExpired:
            self.temporal_proc.kill()
        stop_postgres(self.pgdata)


def start_stack(base: Path, persistent: bool = True) -> TestStack:
    port = free_port()
    db = base / "temporal.db" if persistent else None
    proc = start_temporal(db, "127.0.0.1", port, 0, base / "temporal.log")
    pgdata = base / "pg"
    _, url = start_postgres(pgdata)
    admin, admin_keys_file = pinned_test_admin(base)
    return TestStack(temporal_address=f"127.0.0.1:{port}", admin_url=url, pgdata=pgdata, temporal_proc=proc,
                     admin=admin, admin_keys_file=admin_keys_file)


def worker_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAMBOO_")}
    env.update({
        "BAMBOO_TEMPORAL_ADDRESS": settings.temporal_address,
        "BAMBOO_DATABASE_URL": settings.database_url or "",
        "BAMBOO_LLM_BASE_URL": settings.llm_base_url or "",
        "BAMBOO_EMBEDDING_BASE_URL": settings.embedding_base_url or "",
        "BAMBOO_EMBEDDING_MODEL": settings.embedding_model,
        "BAMBOO_LLM_CONCURRENCY": str(settings.llm_concurrency),
        "PYTHONPATH": str(ROOT),
    })
    if settings.keys_dir is not None:
        env["BAMBOO_KEYS_DIR"] = str(settings.keys_dir)
    if settings.admin_keys_file is not None:
        env["BAMBOO_ADMIN_KEYS_FILE"] = str(settings.admin_keys_file)
    if settings.deployment is not None:
        env["BAMBOO_DEPLOYMENT"] = settings.deployment
    return env


def spawn_worker(settings: Settings, log: Path) -> subprocess.Popen:
    """A worker in its own process, so a test can SIGKILL it like a crashed host."""
    return subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=worker_env(settings),
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
