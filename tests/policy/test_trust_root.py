"""The trust root: only statements signed by a pinned administrator's key change the registry."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bamboo.approvals.admin import sign_statement
from bamboo.approvals.keys import LocalKey
from policy.approvers import DeploymentPolicy, Role, authenticate
from policy.signing import DEFAULT_DEPLOYMENT
from policy.signing import StatementKind as RequestKind
from policy.trust_root import (
    AccountBinding,
    KeyRegistration,
    SignedStatement,
    StatementKind,
    TrustRoot,
    TrustRootError,
    fold_registry,
    parse_pinned_admins,
    verify,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def key(identity: str) -> LocalKey:
    return LocalKey(identity, Ed25519PrivateKey.generate())


ADMIN, OTHER = key("ops-admin"), key("mallory")
ROOT = TrustRoot.model_validate({"admins": [{"identity": ADMIN.identity, "public_key": ADMIN.public_key}]})
ALICE, BOB = key("alice"), key("bob")


def register(signer: LocalKey, who: LocalKey, roles, at: datetime = T0, **scope) -> SignedStatement:
    body = KeyRegistration(public_key=who.public_key, roles=tuple(roles), **scope)
    return sign_statement(signer, StatementKind.REGISTER_KEY, who.identity, body, deployment=ROOT.deployment, now=at)


def test_only_a_pinned_administrators_signature_counts():
    good = register(ADMIN, ALICE, [Role.APPROVE])
    by_other = register(OTHER, BOB, [Role.APPROVE_STATE_CHANGING])
    # a requester's own key with a pinned admin's name on it
    renamed = SignedStatement(statement=by_other.statement.model_copy(update={"signer": "ops-admin"}),
                              signature=by_other.signature)
    # the admin's statement with its roles widened after signing
    widened = SignedStatement(statement=good.statement.model_copy(update={
        "statement_id": "ab" * 16, "body": {**good.statement.body, "roles": ["approve_state_changing"]}}),
        signature=good.signature)
    registry = fold_registry([good, by_other, renamed, widened], ROOT)
    assert [(k.identity, sorted(k.roles)) for k in registry.keys] == [("alice", [Role.APPROVE])]
    assert len(registry.ignored) == 3
    assert verify(by_other, ROOT) is not None and verify(good, ROOT) is None


def test_a_statement_counts_only_in_the_deployment_it_was_signed_for():
    """Staging and production pin the same administrator; her registration of alice in staging, copied into
    production's table, registers nobody there."""
    body = KeyRegistration(public_key=ALICE.public_key, roles=(Role.APPROVE_STATE_CHANGING,))
    in_staging = sign_statement(ADMIN, StatementKind.REGISTER_KEY, "alice", body, deployment="staging", now=T0)
    production = ROOT.model_copy(update={"deployment": "production"})
    staging = ROOT.model_copy(update={"deployment": "staging"})
    assert verify(in_staging, production) == "signed for the deployment 'staging', not for this one ('production')"
    assert fold_registry([in_staging], production).keys == ()
    assert [k.identity for k in fold_registry([in_staging], staging).keys] == ["alice"]
    # renamed after signing, it no longer matches its signature
    renamed = SignedStatement(statement=in_staging.statement.model_copy(update={"deployment": "production"}),
                              signature=in_staging.signature)
    assert "signature does not match" in (verify(renamed, production) or "")


def test_a_deployment_name_is_pinned_in_the_settings_and_embedded_by_default():
    from bamboo.settings import Settings

    assert Settings(database_url=None).resolved_deployment() == "embedded"
    assert Settings(database_url="postgresql://h/db").resolved_deployment() == "default"
    assert Settings(database_url="postgresql://h/db", deployment="production").resolved_deployment() == "production"
    with pytest.raises(ValueError):
        Settings(deployment="Prod Cluster")


def test_latest_signed_statement_decides_and_old_copies_change_nothing():
    first = register(ADMIN, ALICE, [Role.APPROVE, Role.APPROVE_STATE_CHANGING], T0)
    rotated = register(ADMIN, BOB.__class__("alice", BOB.private_key), [Role.APPROVE], T0 + timedelta(hours=1))
    revoked = sign_statement(ADMIN, StatementKind.REVOKE_KEY, "alice", deployment=ROOT.deployment, now=T0 + timedelta(hours=2))
    # rows arrive in any order; a copy of the first registration stored again after the revocation
    registry = fold_registry([revoked, rotated, first, first], ROOT)
    assert registry.keys == ()
    registry = fold_registry([rotated, first], ROOT)
    assert registry.keys[0].public_key == BOB.public_key and registry.keys[0].roles == frozenset({Role.APPROVE})
    assert len(registry.history) == 2


def test_front_end_speaks_only_for_its_scope():
    console = key("console")
    statements = [
        register(ADMIN, ALICE, [Role.REQUEST]),
        register(ADMIN, BOB, [Role.APPROVE_STATE_CHANGING]),
        register(ADMIN, console, [Role.FRONT_END]),
        sign_statement(ADMIN, StatementKind.BIND_ACCOUNT, "console/al",
                       AccountBinding(front_end="console", account="al", identity="alice"), deployment=ROOT.deployment),
    ]
    policy = DeploymentPolicy(approvers=fold_registry(statements, ROOT).keys)
    assert policy.may_speak_for("console", "alice")
    assert not policy.may_speak_for("console", "bob")
    # a front end registered by someone else's key is no front end at all
    assert not fold_registry([register(OTHER, console, [Role.FRONT_END])], ROOT).keys

    body = {"text": "hi"}
    for identity, ok in (("alice", True), ("bob", False)):
        auth = console.authorize(RequestKind.MESSAGE, "s1", body, identity=identity, now=T0, deployment=DEFAULT_DEPLOYMENT)
        verdict = authenticate(policy, kind=RequestKind.MESSAGE, session_id="s1", identity=identity, body=body,
                               auth=auth, now=T0 + timedelta(seconds=1))
        assert verdict.ok is ok, verdict.detail


def test_person_entry_may_name_its_front_ends():
    bot = key("mattermost-bot")
    statements = [register(ADMIN, ALICE, [Role.REQUEST], front_ends=("mattermost-bot",)),
                  register(ADMIN, bot, [Role.FRONT_END])]
    policy = DeploymentPolicy(approvers=fold_registry(statements, ROOT).keys)
    assert policy.may_speak_for("mattermost-bot", "alice")


def test_pinned_admins_file_is_strict():
    line = f"ops-admin {ADMIN.public_key}"
    assert parse_pinned_admins(f"# admins\n\n{line}  # the on-call lead\n").admins[0].identity == "ops-admin"
    for bad in ("ops-admin", f"ops-admin {ADMIN.public_key} extra", "ops-admin AAAA", f"Bad Name {ADMIN.public_key}",
                f"{line}\n{line}"):
        with pytest.raises(TrustRootError):
            parse_pinned_admins(bad)


def _with_id(signed: SignedStatement, statement_id: str) -> SignedStatement:
    """``signed`` as the administrator would have signed it under another (random) id."""
    from policy.trust_root import statement_bytes

    statement = signed.statement.model_copy(update={"statement_id": statement_id})
    return SignedStatement(statement=statement, signature=ADMIN.sign(statement_bytes(statement)))


@pytest.mark.parametrize("ids", [("00" * 16, "ff" * 16), ("ff" * 16, "00" * 16)])
def test_a_revocation_in_the_second_of_the_registration_ends_it(ids):
    """Review finding: issue times are whole seconds and ties fell to the random ids, so a revocation signed in the
    second of the registration it ended was lost about half the time."""
    half_a_second = T0.replace(microsecond=500_000)
    registration = _with_id(register(ADMIN, BOB, [Role.APPROVE_STATE_CHANGING], at=T0), ids[0])
    revocation = _with_id(sign_statement(ADMIN, StatementKind.REVOKE_KEY, "bob", deployment=ROOT.deployment,
                                         now=half_a_second), ids[1])
    assert fold_registry([registration, revocation], ROOT).keys == ()


@pytest.mark.parametrize("ids", [("00" * 16, "ff" * 16), ("ff" * 16, "00" * 16)])
def test_two_registrations_in_one_second_leave_neither_in_force(ids):
    """A key rotated in the second it was registered (after a leak): which is the latest is unknown, so neither
    counts, rather than the leaked key half the time."""
    leaked, fresh = key("bob"), key("bob")
    first = _with_id(register(ADMIN, leaked, [Role.APPROVE], at=T0), ids[0])
    rotated = _with_id(register(ADMIN, fresh, [Role.APPROVE], at=T0.replace(microsecond=900_000)), ids[1])
    registry = fold_registry([first, rotated], ROOT)
    assert registry.keys == ()
    assert any("same second" in i.reason and i.subject == "bob" for i in registry.ignored)
    later = register(ADMIN, fresh, [Role.APPROVE], at=T0 + timedelta(seconds=1))
    assert [k.public_key for k in fold_registry([first, rotated, later], ROOT).keys] == [fresh.public_key]


def test_a_deployment_of_its_own_must_name_itself(tmp_path):
    """Review finding: two deployments that both left BAMBOO_DEPLOYMENT unset both answered to "default", so a
    decision an approver registered in both signed in staging counted in production. Every process that reads
    the trust root of a deployment with its own database refuses to go on without the name."""
    from bamboo.approvals.admin import PinnedAdmins
    from bamboo.settings import Settings

    keys = tmp_path / "admin-keys"
    keys.write_text(f"ops-admin {ADMIN.public_key}\n")
    unnamed = Settings(_env_file=None, database_url="postgresql://h/db", admin_keys_file=keys)  # type: ignore[call-arg]
    with pytest.raises(TrustRootError, match="BAMBOO_DEPLOYMENT is not set"):
        PinnedAdmins.of(unnamed).root()
    named = unnamed.model_copy(update={"deployment": "production"})
    assert PinnedAdmins.of(named).root().deployment == "production"
    embedded = Settings(_env_file=None, database_url=None, data_dir=tmp_path)  # type: ignore[call-arg]
    assert PinnedAdmins.of(embedded).root().deployment == "embedded"


OUT_OF_RANGE = "0001-01-01T00:00:00+05:00"  # year 0 in UTC: astimezone raised OverflowError


def test_a_row_or_signal_dated_out_of_range_is_invalid_not_an_error_nobody_catches():
    """Readers of rows anyone with the app role may write (trust_statements, capability grants, durable grants)
    and of decide signals skip what fails validation. An out-of-range time raised OverflowError, which pydantic
    does not wrap: one such row in the append-only table made every registry read fail, so no code ran and
    no decision was admitted until someone disabled the table's trigger."""
    from pydantic import ValidationError

    from policy.decisions import OperatorDecision
    from policy.trust_root import TrustStatement

    statement = {"kind": "register_key", "subject": "x", "body": {}, "deployment": "prod", "issued_at": OUT_OF_RANGE,
                 "statement_id": "ab" * 16, "signer": "x", "key_id": "0" * 16}
    auth = {"signer": "bob", "key_id": "0" * 16, "expires_at": OUT_OF_RANGE, "nonce": "a" * 32, "signature": "AAAA"}
    with pytest.raises(ValidationError, match="out of the range of times"):
        TrustStatement.model_validate(statement)
    with pytest.raises(ValidationError, match="out of the range of times"):
        OperatorDecision.model_validate({"turn": 1, "code_hash": "a" * 64, "kind": "run_once", "approver": "bob",
                                         "auth": auth})


def test_a_revocation_outlives_its_signer_when_the_key_is_retired_not_deleted(tmp_path):
    """One administrator registers bob; another revokes him (his key was stolen), then rotates her own key.
    Deleting her line dropped her revocation with it and bob's stolen key approved state-changing code again,
    with nothing said. A retired key still ends what it ended and starts nothing; a deleted one's lapsed
    revocation is flagged while its subject is in force."""
    from bamboo.approvals.admin import retire

    second, second_new = key("admin-two"), key("admin-two")
    registered = register(ADMIN, BOB, [Role.APPROVE_STATE_CHANGING])
    revoked = sign_statement(second, StatementKind.REVOKE_KEY, "bob", deployment=ROOT.deployment,
                             now=T0 + timedelta(days=1))
    path = tmp_path / "admin-keys"
    path.write_text(f"# pinned\n{ADMIN.identity} {ADMIN.public_key}\n{second.identity} {second.public_key}  # two\n")
    both = parse_pinned_admins(path.read_text())
    assert fold_registry([registered, revoked], both).keys == ()

    deleted = parse_pinned_admins(f"{ADMIN.identity} {ADMIN.public_key}\n{second_new.identity} {second_new.public_key}\n")
    lapsed = fold_registry([registered, revoked], deleted)
    assert [k.identity for k in lapsed.keys] == ["bob"]  # what a deleted line does: said, not silent
    assert "bob is in force now" in lapsed.ignored[0].reason and "retired" in lapsed.ignored[0].reason

    assert retire(path, "Admin-Two") == 1
    with path.open("a") as fh:
        fh.write(f"{second_new.identity} {second_new.public_key}\n")
    rotated = parse_pinned_admins(path.read_text())
    assert [a.key_id for a in rotated.retired] == [second.key_id] and len(rotated.admins) == 2
    assert path.read_text().startswith("# pinned\n")
    assert fold_registry([registered, revoked], rotated).keys == ()
    # the retired key starts nothing: a registration it signs (before or after retiring) counts for nothing
    by_retired = register(second, ALICE, [Role.APPROVE_STATE_CHANGING], at=T0 + timedelta(days=2))
    assert "retired from admin-two" in (verify(by_retired, rotated) or "")
    assert [k.identity for k in fold_registry([registered, revoked, by_retired], rotated).keys] == []


def test_a_key_is_pinned_or_retired_never_both():
    line = f"{ADMIN.identity} {ADMIN.public_key}"
    with pytest.raises(TrustRootError, match="both pins and retires"):
        parse_pinned_admins(f"{line}\nretired {line}\n")
    with pytest.raises(TrustRootError, match="line 1: expected 'IDENTITY PUBLIC-KEY' or 'retired IDENTITY"):
        parse_pinned_admins(f"former {line}\n")


def test_keys_retire_rewrites_the_pinned_file_and_says_what_it_did(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from bamboo.cli.main import app

    path = tmp_path / "admin-keys"
    path.write_text(f"{ADMIN.identity} {ADMIN.public_key}\n")
    monkeypatch.setenv("BAMBOO_ADMIN_KEYS_FILE", str(path))
    monkeypatch.setenv("BAMBOO_DATA_DIR", str(tmp_path))
    done = CliRunner().invoke(app, ["keys", "retire", "ops-admin"])
    assert done.exit_code == 0 and "retired 1 key(s) of ops-admin" in done.output, done.output
    assert path.read_text() == f"retired {ADMIN.identity} {ADMIN.public_key}\n"
    again = CliRunner().invoke(app, ["keys", "retire", "ops-admin"])
    assert again.exit_code != 0 and "has no pinned key" in again.output


def test_a_key_pinned_while_retire_rewrites_the_file_is_not_lost(tmp_path, monkeypatch):
    """retire reads the file, then replaces it: a pin appended in between was lost with the old file."""
    import threading
    from pathlib import Path

    from bamboo.approvals.admin import pin, retire

    path = tmp_path / "admin-keys"
    path.write_text(f"{ADMIN.identity} {ADMIN.public_key}\n")
    newcomer = key("new-admin")
    read, go = threading.Event(), threading.Event()
    real_read = Path.read_text

    def read_then_wait(self, *args, **kwargs):
        text = real_read(self, *args, **kwargs)
        if self == path and threading.current_thread().name == "retire" and not read.is_set():
            read.set()
            go.wait(10)
        return text

    monkeypatch.setattr(Path, "read_text", read_then_wait)
    retiring = threading.Thread(target=retire, args=(path, "ops-admin"), name="retire")
    retiring.start()
    assert read.wait(10)
    pinning = threading.Thread(target=pin, args=(path, "new-admin", newcomer.public_key))
    pinning.start()
    pinning.join(0.5)  # with the lock it waits for the retire; without, it appended to the file being replaced
    go.set()
    retiring.join(10)
    pinning.join(10)
    root = parse_pinned_admins(real_read(path))
    assert [a.identity for a in root.admins] == ["new-admin"] and [a.identity for a in root.retired] == ["ops-admin"]
