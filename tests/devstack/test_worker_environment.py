"""The worker `bamboo dev up` starts is the embedded stack's: it finds the embedded Postgres itself and pins the
demo's administrator, so the demo's registrations count (issue 26's demo found every request refused as
unregistered: the worker was handed BAMBOO_DATABASE_URL, became a deployment of its own and pinned nobody)."""

from __future__ import annotations

from bamboo.devstack.stack import worker_environment
from bamboo.settings import Settings


def test_the_embedded_stacks_worker_pins_the_embedded_admin_keys_file(tmp_path):
    settings = Settings(_env_file=None, data_dir=tmp_path)
    env = worker_environment(settings, {"PATH": "/usr/bin", "BAMBOO_LLM_MODEL": "m"})
    assert env == {"PATH": "/usr/bin", "BAMBOO_LLM_MODEL": "m", "BAMBOO_DATA_DIR": str(tmp_path)}
    worker = Settings(_env_file=None, data_dir=env["BAMBOO_DATA_DIR"])
    assert worker.embedded_database and worker.resolved_admin_keys_file() == tmp_path / "admin-keys"


def test_a_deployment_database_stays_the_callers(tmp_path):
    env = worker_environment(Settings(_env_file=None, data_dir=tmp_path), {"BAMBOO_DATABASE_URL": "postgresql://db"})
    assert env["BAMBOO_DATABASE_URL"] == "postgresql://db"
