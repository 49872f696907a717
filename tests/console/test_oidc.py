"""Single sign-on: a person signs in to the console through an OpenID Connect issuer on loopback (in the
browser, code flow with PKCE, ID token verified by Authlib) and approves as the identity the issuer named; an
impostor issuer whose ID token is signed with a key it does not publish gets nobody signed in. The claim is
taken exactly as spelled: ``Carol`` at the issuer is not ``carol`` (tests/console/test_sign_ins.py).
"""

from __future__ import annotations

import pytest

from bamboo.investigation import client as inv
from tests.console.conftest import CONSOLE_IDENTITY
from tests.console.oidc_provider import OidcProvider
from tests.investigation.conftest import READ_CODE, TASK_ID, entries, new_session, pending_turn, wait_for
from tests.support.browser import CHROMIUM_MISSING, Browser

pytestmark = [pytest.mark.usefixtures("terminate_sessions"),
              pytest.mark.skipif(CHROMIUM_MISSING is not None, reason=CHROMIUM_MISSING or "")]


async def _sso(browser: Browser, name: str) -> None:
    await browser.get("/login")
    await browser.click("#oidc-login")
    await browser.wait_text("Sign in to the test issuer")
    await browser.fill("#issuer-username", name)
    await browser.click("#issuer-sign-in")


async def test_a_person_signs_in_through_the_issuer_and_approves_as_that_identity(
        ops, client, settings, running_worker, brain, console_factory, tmp_path):
    session = new_session()
    brain.propose(READ_CODE)
    await inv.start(client, inv.start_input(settings, session, "alice", task_id=TASK_ID, startup_hypothesis=False))
    await inv.send_message(client, session, "status please", ops.alice, force_tool=True)
    await pending_turn(client, session, 1)
    with OidcProvider(require_pkce=True) as issuer:
        console = console_factory(**issuer.console_env())
        carol = Browser(console.url, tmp_path / "shots")
        try:
            await _sso(carol, "carol")
            await carol.wait_text("signed in as carol", "#who")
            assert issuer.issued and issuer.issued[0]["preferred_username"] == "carol"
            assert issuer.challenges[0][1] == "S256" and issuer.verified == [True]
            await carol.get(f"/sessions/{session}/review")
            await carol.click("#choose-run_once")
            await carol.wait_text("run ok", ".kind-reply")
        finally:
            carol.quit()
    decisions = await wait_for(lambda: entries(client, session, "decision"))
    assert [(d.actor, d.data["signer"]) for d in decisions] == [("carol", CONSOLE_IDENTITY)]


async def test_an_id_token_the_issuer_did_not_sign_signs_nobody_in(ops, console_factory, tmp_path):
    with OidcProvider(forge=True) as impostor:
        console = console_factory(**impostor.console_env())
        someone = Browser(console.url, tmp_path / "shots")
        try:
            await _sso(someone, "bob")
            failed = await someone.wait_text("Single sign-on failed")
            assert "signed in as" not in failed and someone.path == "/login"
            await someone.get("/approvals")
            assert someone.path == "/login"
        finally:
            someone.quit()
