"""The audit signing key (it signs the checkpoints that anchor the audit chain) is closed to sandbox runs (review):
with BAMBOO_AUDIT_CHECKPOINT_FILE set and BAMBOO_AUDIT_SIGNING_KEY not, the store signs with ``audit-signing.key``
beside the checkpoint, a file no setting names. A degraded start did not check it, and a run read it whole at 0644.
Now the degraded start checks the key the store signs with, and the key is refused wherever it is loaded while group
or others may read it, as an approver's key is."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bamboo.sandbox.errors import SandboxUnavailable
from bamboo.settings import Settings
from bamboo.store import resolve_store_location
from bamboo.store.audit_checkpoint import CheckpointError, CheckpointFile, create_signing_key, load_signing_key
from tests.sandbox.conftest import harness
from worker.wiring import runner_from_settings, secret_files


@pytest.fixture
def deployment(monkeypatch):
    """A deployment's directory others may traverse (0755), the worker's working directory; removed after."""
    path = Path(tempfile.mkdtemp(prefix="bamboo-test-deploy-"))
    path.chmod(0o755)
    monkeypatch.chdir(path)  # no .env of the checkout's
    for name in ("BAMBOO_AUDIT_SIGNING_KEY", "BAMBOO_AUDIT_CHECKPOINT_FILE", "BAMBOO_DATABASE_URL", "BAMBOO_DATA_DIR",
                 "BAMBOO_KEYS_DIR", "BAMBOO_PANDA_X509_PROXY", "BAMBOO_MCP_SERVERS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _key_the_store_signs_with(deployment: Path, monkeypatch, where: str) -> Path:
    """``checkpoint_file``: BAMBOO_AUDIT_CHECKPOINT_FILE set, the key the default beside it; ``embedded``: the
    embedded stack's, under the data directory (its keys directory, where only *.pem files were checked)."""
    if where == "checkpoint_file":
        etc = deployment / "etc"
        etc.mkdir(mode=0o755)
        monkeypatch.setenv("BAMBOO_DATABASE_URL", "postgresql://bamboo@localhost/bamboo")
        monkeypatch.setenv("BAMBOO_AUDIT_CHECKPOINT_FILE", str(etc / "audit-checkpoint.json"))
        key = etc / "audit-signing.key"
    else:
        data = deployment / "data"
        (data / "keys").mkdir(parents=True, mode=0o755)
        (data / "stack.json").write_text(json.dumps({"database_url": "postgresql://bamboo@localhost:5999/bamboo"}))
        monkeypatch.setenv("BAMBOO_DATA_DIR", str(data))
        key = data / "keys" / "audit-signing.key"
    create_signing_key(key)
    key.chmod(0o644)  # provisioned by configuration management under umask 022
    return key


@pytest.mark.skipif(os.geteuid() != 0, reason="degraded isolation needs a root worker (a uid per run)")
@pytest.mark.parametrize("where", ["checkpoint_file", "embedded"])
async def test_a_degraded_start_checks_the_audit_key_the_store_signs_with(where, deployment, monkeypatch):
    key = _key_the_store_signs_with(deployment, monkeypatch, where)
    settings = Settings(sandbox_isolation="degraded")
    assert resolve_store_location(settings).signing_key == key
    assert key in secret_files(settings)
    with pytest.raises(SandboxUnavailable) as refused:
        runner_from_settings(settings)
    message = str(refused.value)
    assert "\n" not in message and f"chmod 600 {key}" in message, message
    key.chmod(0o600)  # what the message says to do: then the sandbox starts, and the key is closed to runs
    async with harness("degraded", secret_files=secret_files(settings)) as h:
        res = await h.run(f"""
try:
    return {{"read": open({str(key)!r}, "rb").read().hex()}}
except OSError as exc:
    return {{"read": type(exc).__name__}}
""")
    assert res.status == "ok", res.error
    assert res.return_value == {"read": "PermissionError"}, res.return_value


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620], ids=oct)
def test_an_audit_signing_key_group_or_others_may_read_or_write_is_refused(tmp_path, mode):
    """Whoever reads the key signs checkpoints (a rewritten chain then verifies): refused with the chmod to run, as
    ``KeyStore.load`` refuses an approver's key; the worker's checkpoint file does not start on it."""
    key = tmp_path / "audit-signing.key"
    create_signing_key(key)
    key.chmod(mode)
    with pytest.raises(CheckpointError, match=f"chmod 600 {key}$"):
        load_signing_key(key)
    with pytest.raises(CheckpointError, match="readable or writable by group or others"):
        CheckpointFile(tmp_path / "audit-checkpoint.json", key, sign=True)
    key.chmod(0o600)
    assert load_signing_key(key).public_key() is not None
    CheckpointFile(tmp_path / "audit-checkpoint.json", key, sign=True)
