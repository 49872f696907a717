"""The executor's verification keys name whose they are, and what each kind of key may claim (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bamboo.approvals.keys import KeyStore
from bamboo.executors import signer
from bamboo.executors.config import ExecutorConfigError, parse_verification_keys
from policy.envelopes import EnvelopeClaims, EnvelopeRefusal, verify_envelope

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def keys(tmp_path):
    store = KeyStore(tmp_path)
    return {name: store.create(name) for name in ("agent", "alice")}


def test_each_line_names_the_kind_and_identity_of_its_key(keys):
    text = (f"# the executor's trusted keys\nagent {keys['agent'].identity} {keys['agent'].public_key}\n\n"
            f"person Alice {keys['alice'].public_key}  # runs commands herself\n")
    parsed = parse_verification_keys(text)
    assert {(k.kind, k.identity) for k in parsed.values()} == {("agent", "agent"), ("person", "alice")}
    assert parsed[keys["alice"].key_id].public_key == keys["alice"].public_key


@pytest.mark.parametrize("line, expected", [
    ("{alice}", "line 1 is a bare key; each line now names whose key it is: 'agent IDENTITY BASE64KEY' or "
                "'person IDENTITY BASE64KEY'"),
    ("admin alice {alice}", "line 1: expected 'agent IDENTITY BASE64KEY' or 'person IDENTITY BASE64KEY'"),
    ("person alice", "line 1: expected"),
    ("person alice not-a-key", "line 1 is unusable"),
    ("person alice {alice}\nagent agent {alice}", "line 2 lists key"),
    ("# nothing\n", "holds no key"),
])
def test_a_malformed_keys_file_is_one_line_naming_the_line(keys, line, expected):
    with pytest.raises(ExecutorConfigError) as err:
        parse_verification_keys(line.format(alice=keys["alice"].public_key))
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)


def _verdict(keys, signer_name: str, *, phase: str, requester: str):
    parsed = parse_verification_keys(f"agent agent {keys['agent'].public_key}\n"
                                     f"person alice {keys['alice'].public_key}\n")
    key = keys[signer_name]
    claims = EnvelopeClaims(run_id="run-1", tool_call_id="call-1", deployment="default", environment="prod", channel="rw", phase=phase,
                            tool="panda_curl", executable="/usr/bin/curl", argv_digest="a" * 64,
                            targets=("panda:task:1",), rule="panda_task_kill", requester=requester, expires_at=NOW + timedelta(seconds=60),
                            nonce="0" * 32, key_id=key.key_id)
    return verify_envelope(signer.sign(claims, key), keys=parsed, deployment="default", environment="prod", channel="rw",
                           now=NOW)


@pytest.mark.parametrize("signer_name, phase, requester, refusal", [
    ("alice", "operator", "alice", None),
    ("alice", "operator", "nobody-else", EnvelopeRefusal.REQUESTER_NOT_SIGNER),
    ("alice", "interactive", "alice", EnvelopeRefusal.PHASE_NOT_FOR_KEY),
    ("alice", "automatic", "alice", EnvelopeRefusal.PHASE_NOT_FOR_KEY),
    ("agent", "interactive", "nobody-else", None),
    ("agent", "automatic", "alice", None),
    ("agent", "operator", "alice", EnvelopeRefusal.PHASE_NOT_FOR_KEY),
])
def test_what_each_kind_of_key_may_claim(keys, signer_name, phase, requester, refusal):
    verdict = _verdict(keys, signer_name, phase=phase, requester=requester)
    assert verdict.refusal is refusal, verdict.detail
    assert "\n" not in verdict.detail
