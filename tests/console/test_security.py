"""The console's doors, tried by someone who wants through them: forms without this session's CSRF token or
from another origin, a name the sign-in did not give, an expired sign-in, a wrong password, a person the
deployment never registered, and a console whose key is not a registered front end.

Each attempt is checked where it matters: the session's transcript and PanDA, not only the HTTP answer.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from bamboo.approvals.keys import KeyStore
from bamboo.investigation import client as inv
from tests.console.conftest import CONSOLE_IDENTITY, ConsoleClient, console_env
from tests.investigation.conftest import READ_CODE, TASK_ID, entries, new_session, pending_turn, wait_for
from tests.services import ROOT

pytestmark = pytest.mark.usefixtures("terminate_sessions")


async def _pending_session(client, settings, ops, brain, code: str = READ_CODE):
    session = new_session()
    brain.propose(code)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status please", ops.alice, force_tool=True)
    return session, await pending_turn(client, session, 1)


def _decide(http: ConsoleClient, session: str, view, csrf: str | None, **extra) -> "object":
    data = {"turn": str(view.turn), "code_hash": view.code_hash, "review": view.review, "kind": "run_once",
            **extra}
    if csrf is not None:
        data["csrf"] = csrf
    return http.http.post(f"/sessions/{session}/decide", data=data)


async def test_forms_without_this_sessions_token_or_from_another_origin_are_refused(
        ops, client, settings, running_worker, brain, http_clients):
    session, view = await _pending_session(client, settings, ops, brain)
    bob, mallory = http_clients(), http_clients()
    assert (await asyncio.to_thread(bob.sign_in, "bob")).status_code == 303
    assert (await asyncio.to_thread(mallory.sign_in, "carol")).status_code == 303
    foreign = await asyncio.to_thread(mallory.csrf, f"/sessions/{session}/review")

    attempts = [
        await asyncio.to_thread(_decide, bob, session, view, None),  # no token
        await asyncio.to_thread(_decide, bob, session, view, "x" * 43),  # a made-up token
        await asyncio.to_thread(_decide, bob, session, view, foreign),  # another person's token
    ]
    own = await asyncio.to_thread(bob.csrf, f"/sessions/{session}/review")
    cross_site = await asyncio.to_thread(lambda: bob.http.post(
        f"/sessions/{session}/decide", headers={"Origin": "http://evil.example"},
        data={"csrf": own, "turn": "1", "code_hash": view.code_hash, "review": view.review, "kind": "run_once"}))
    attempts.append(cross_site)
    assert [r.status_code for r in attempts] == [403, 403, 403, 403]
    assert "did not come from this console" in attempts[0].text and "another site" in cross_site.text
    await asyncio.sleep(1.0)
    assert await entries(client, session, "decision") == [] and await entries(client, session, "refused_decision") == []
    assert await inv.pending(client, session) is not None

    # Signed out, a form is not even read: the sign-in page answers.
    anonymous = http_clients()
    out = await asyncio.to_thread(_decide, anonymous, session, view, own)
    assert out.status_code == 303 and out.headers["location"].startswith("/login")


async def test_the_decision_is_the_signed_in_persons_whatever_the_form_says(
        ops, client, settings, running_worker, brain, http_clients):
    session, view = await _pending_session(client, settings, ops, brain)
    bob = http_clients()
    await asyncio.to_thread(bob.sign_in, "bob")
    token = await asyncio.to_thread(bob.csrf, f"/sessions/{session}/review")
    answer = await asyncio.to_thread(_decide, bob, session, view, token, approver="carol", identity="carol")
    assert answer.status_code == 303
    decisions = await wait_for(lambda: entries(client, session, "decision"))
    assert [(d.actor, d.data["signer"]) for d in decisions] == [("bob", CONSOLE_IDENTITY)]


async def test_a_sign_in_expires(ops, client, settings, running_worker, brain, console_factory):
    console = console_factory(BAMBOO_CONSOLE_SESSION_TTL_S="2")
    session, view = await _pending_session(client, settings, ops, brain)
    bob = ConsoleClient(console.url)
    try:
        await asyncio.to_thread(bob.sign_in, "bob")
        token = await asyncio.to_thread(bob.csrf, f"/sessions/{session}/review")
        await asyncio.sleep(3)
        late = await asyncio.to_thread(_decide, bob, session, view, token)
        assert late.status_code == 303 and late.headers["location"].startswith("/login")
        page = await asyncio.to_thread(bob.page, "/approvals")
        assert "Sign in" in page.text and "expired" in page.text
        await asyncio.sleep(1.0)
        assert await entries(client, session, "decision") == []
    finally:
        bob.close()


async def test_wrong_passwords_and_unknown_names_get_the_same_answer(ops, http_clients):
    someone = http_clients()
    wrong = await asyncio.to_thread(someone.sign_in, "bob", "not the password")
    unknown = await asyncio.to_thread(someone.sign_in, "nobody", "not the password")
    assert wrong.status_code == unknown.status_code == 401
    assert "Wrong user name or password." in wrong.text and "Wrong user name or password." in unknown.text
    assert (await asyncio.to_thread(someone.page, "/approvals")).url.path == "/login"


async def test_a_person_the_deployment_never_registered_is_refused_by_the_session(
        ops, client, settings, running_worker, brain, http_clients):
    session, view = await _pending_session(client, settings, ops, brain)
    outsider = http_clients()  # has a console account, but no entry in the approver registry
    await asyncio.to_thread(outsider.sign_in, "outsider")
    page = await asyncio.to_thread(outsider.page, f"/sessions/{session}/review")
    assert "not registered with this deployment" in page.text
    token = await asyncio.to_thread(outsider.csrf, f"/sessions/{session}/review")
    refused = await asyncio.to_thread(_decide, outsider, session, view, token)
    shown = await asyncio.to_thread(outsider.page, refused.headers["location"])
    assert "Refused (unregistered_identity)" in shown.text
    recorded = await entries(client, session, "refused_decision")
    assert [(e.actor, e.data["refusal"]) for e in recorded] == [("outsider", "unregistered_identity")]
    assert await inv.pending(client, session) is not None


async def test_a_console_whose_key_is_not_a_registered_front_end_does_not_start(
        settings, accounts_file, ops, keys_dir, tmp_path):
    """``reviewer`` is registered, but as a person (no front_end role): a console with that key would sign
    requests sessions refuse (not_a_front_end), so it says so and stops."""
    store = KeyStore(keys_dir)
    assert store.exists("reviewer")
    env = console_env(settings, accounts_file, tmp_path, BAMBOO_CONSOLE_IDENTITY="reviewer")
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "console"], cwd=ROOT,
                                   env=env, capture_output=True, text=True, timeout=120)
    said = " ".join(done.stderr.split())  # the error console wraps long lines
    assert done.returncode == 1
    assert "is not registered with the front_end role" in said and "--role front_end" in said


async def test_single_sign_on_does_not_start_without_a_claim_chosen_for_the_identity(
        settings, accounts_file, tmp_path):
    """It took preferred_username by default, which OpenID Connect does not promise is unique: at an issuer that
    lets people edit it, whoever named themselves after an approver signed in as that approver."""
    env = console_env(settings, accounts_file, tmp_path, BAMBOO_CONSOLE_OIDC_DISCOVERY_URL="http://127.0.0.1:9/x",
                      BAMBOO_CONSOLE_OIDC_CLIENT_ID="bamboo-console")
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bamboo.cli.main", "console"], cwd=ROOT,
                                   env=env, capture_output=True, text=True, timeout=120)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1 and "single sign-on needs BAMBOO_CONSOLE_OIDC_IDENTITY_CLAIM" in said, said


async def test_the_embedded_stack_registers_the_consoles_own_key_once(services, settings, tmp_path):
    """Only the embedded default provisions the console as a front end (as the demo provisions its people),
    signed by the embedded stack's own administrator; a deployment with its own database registers it
    deliberately, and the console checks that at start."""
    from bamboo.approvals.admin import PinnedAdmins
    from bamboo.approvals.registry import ApproverRegistry
    from bamboo.frontends.console.serve import provision_embedded_front_end
    from bamboo.frontends.console.settings import ConsoleSettings
    from policy.approvers import Role

    local = settings.model_copy(update={"keys_dir": tmp_path / "keys", "data_dir": tmp_path, "database_url": None,
                                        "admin_keys_file": None})
    registry = ApproverRegistry(services.store.pool, services.store.audit, PinnedAdmins.of(local))
    console = ConsoleSettings(_env_file=None, identity="embedded-console")
    first = await provision_embedded_front_end(local, console, registry)
    again = await provision_embedded_front_end(local, console, registry)
    assert first.public_key == again.public_key
    entry = next(e for e in await registry.active() if e.identity == "embedded-console")
    assert entry.roles == frozenset({Role.FRONT_END}) and entry.public_key == first.public_key
    assert entry.speaks_for == frozenset()  # whom it speaks for is what administrators bind, not "everyone"
    assert "demo-admin" in (tmp_path / "admin-keys").read_text()
    async with services.store.pool.connection() as conn:
        rows = await (await conn.execute("SELECT count(*) FROM audit WHERE kind = 'trust_register_key' "
                                         "AND body->>'subject' = 'embedded-console'")).fetchone()
    assert rows[0] == 1
