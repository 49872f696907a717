"""How a console sign-in starts and ends, tried by someone who wants one that is not theirs.

- Single sign-on takes the issuer's claim exactly as spelled: ``Alice``, ``ALICE``, `` alice`` and ``alice\\r\\n``
  are other subjects of the issuer, not the registered ``alice`` (they were folded into her).
- Signing out, a new password and removing the account each end the sign-in in every copy of its cookie (a
  copy taken before sign-out used to sign decisions for 8 hours).
- Password checks run off the event loop, two at a time, and repeated failures for one name or from one
  address are refused for a while (twenty wrong passwords froze every page for 2.9 s).
- The authorization request carries a PKCE challenge and the code is exchanged with its verifier.

The app is the one ``bamboo console`` serves, with the stand-in backend of ``test_headers``; the issuer is the
loopback one of ``oidc_provider``, reached by the console's own Authlib client.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from argon2 import PasswordHasher
from starlette.testclient import TestClient

from bamboo.frontends.console.accounts import LocalAccounts
from bamboo.frontends.console.app import create_app
from bamboo.frontends.console.oidc import oidc_client
from bamboo.frontends.console.settings import ConsoleSettings
from tests.console.oidc_provider import OidcProvider
from tests.console.test_headers import PASSWORD, SESSION, VIEW, StandInBackend, signed_in

SECRET = "test-cookie-secret-" + "x" * 24
COOKIE = "bamboo_console"


def _fast_accounts(tmp_path, *names: str) -> LocalAccounts:
    accounts = LocalAccounts(tmp_path / "users.json", PasswordHasher(time_cost=1, memory_cost=8192))
    for name in names:
        accounts.add(name, PASSWORD)
    return accounts


def _who(client: TestClient) -> str | None:
    found = re.search(r"signed in as <b>([^<]*)</b>", client.get("/sessions").text)
    return found.group(1) if found else None


def _csrf(client: TestClient, page: str = "/login") -> str:
    return re.search(r'name="csrf" value="([^"]+)"', client.get(page).text).group(1)


def _copy(app, client: TestClient) -> TestClient:
    """Another browser holding a copy of ``client``'s cookie as it is now."""
    thief = TestClient(app, follow_redirects=False)
    thief.cookies.set(COOKIE, client.cookies.get(COOKIE))
    return thief


class Recording(StandInBackend):
    def __init__(self) -> None:
        super().__init__()
        self.decided: list[tuple[str, str]] = []

    async def decide(self, identity, session_id, turn, code_hash, kind, replacement=None, *, review):
        from types import SimpleNamespace
        self.decided.append((identity, session_id))
        return SimpleNamespace(detail="accepted")


# ------------------------------------------------------------------------------------------ single sign-on
class _StandInSSO:
    """Authlib's registered client, standing in: the ID token's claims are what the issuer vouched for."""

    def __init__(self) -> None:
        self.claims: dict = {}

    async def authorize_redirect(self, request, redirect_uri):
        from starlette.responses import RedirectResponse
        return RedirectResponse("https://issuer.example/authorize", status_code=302)

    async def authorize_access_token(self, request):
        return {"userinfo": dict(self.claims)}


class _StandInOAuth:
    def __init__(self) -> None:
        self.sso = _StandInSSO()


def _sso_app(tmp_path, backend=None):
    oauth = _StandInOAuth()
    settings = ConsoleSettings(_env_file=None, oidc_discovery_url="https://issuer.example/.well-known/x",
                               oidc_client_id="console", oidc_identity_claim="sub")
    return create_app(backend or StandInBackend(), settings, _fast_accounts(tmp_path), SECRET, oauth), oauth


@pytest.mark.parametrize("subject", ["Alice", "ALICE", " alice", "alice\t", "alice\r\n"])
def test_a_subject_spelled_otherwise_than_the_identity_signs_nobody_in(tmp_path, subject) -> None:
    app, oauth = _sso_app(tmp_path)
    oauth.sso.claims = {"sub": subject, "iss": "https://issuer.example"}
    client = TestClient(app, follow_redirects=False)
    answer = client.get("/oidc/callback?code=x&state=y")
    assert answer.status_code == 303 and answer.headers["location"] == "/login"
    page = client.get("/login").text
    assert _who(client) is None
    assert "is not an identity as spelled" in page and "does not fold it into" in page
    flash = re.search(r'<p class="flash error"[^>]*>([^<]*)</p>', page).group(1)
    assert "\n" not in flash and "\t" not in flash  # one line, its blanks spelled by repr


def test_a_subject_spelled_as_the_identity_signs_in(tmp_path) -> None:
    app, oauth = _sso_app(tmp_path)
    oauth.sso.claims = {"sub": "alice", "iss": "https://issuer.example"}
    client = TestClient(app, follow_redirects=False)
    assert client.get("/oidc/callback?code=x&state=y").headers["location"] == "/"
    assert _who(client) == "alice"


def _sso_through(client: TestClient, issuer: OidcProvider, username: str) -> httpx.Response:
    """The browser's part of the code flow: the console's redirect, the issuer's sign-in, the way back."""
    start = client.get("/oidc/login")
    assert start.status_code == 302, start.text
    query = {k: v[0] for k, v in parse_qs(urlparse(start.headers["location"]).query).items()}
    back = httpx.post(f"{issuer.url}/authorize", data={**query, "username": username}, follow_redirects=False)
    assert back.status_code == 302, back.text
    target = urlparse(back.headers["location"])
    return client.get(f"{target.path}?{target.query}")


def _real_sso_app(tmp_path, issuer: OidcProvider):
    env = issuer.console_env()
    settings = ConsoleSettings(
        _env_file=None, public_url="http://testserver", oidc_discovery_url=env["BAMBOO_CONSOLE_OIDC_DISCOVERY_URL"],
        oidc_client_id=env["BAMBOO_CONSOLE_OIDC_CLIENT_ID"], oidc_client_secret=env["BAMBOO_CONSOLE_OIDC_CLIENT_SECRET"],
        oidc_identity_claim=env["BAMBOO_CONSOLE_OIDC_IDENTITY_CLAIM"])
    return create_app(StandInBackend(), settings, _fast_accounts(tmp_path), SECRET, oidc_client(settings))


def test_a_login_name_the_issuer_spells_otherwise_signs_nobody_in(tmp_path) -> None:
    """End to end with Authlib and the loopback issuer: ``Carol`` at the issuer is not the registered ``carol``."""
    with OidcProvider() as issuer:
        app = _real_sso_app(tmp_path, issuer)
        folded = TestClient(app, follow_redirects=False)
        answer = _sso_through(folded, issuer, "Carol")
        assert answer.headers["location"] == "/login"
        assert "is not an identity as spelled" in folded.get("/login").text and _who(folded) is None
        carol = TestClient(app, follow_redirects=False)
        assert _sso_through(carol, issuer, "carol").headers["location"] == "/"
        assert _who(carol) == "carol"


def test_the_code_is_asked_for_with_a_pkce_challenge_and_exchanged_with_its_verifier(tmp_path) -> None:
    with OidcProvider(require_pkce=True) as issuer:
        carol = TestClient(_real_sso_app(tmp_path, issuer), follow_redirects=False)
        answer = _sso_through(carol, issuer, "carol")
        assert answer.headers["location"] == "/", carol.get("/login").text
        assert _who(carol) == "carol"
    assert [method for _, method in issuer.challenges] == ["S256"] and issuer.verified == [True]


# ------------------------------------------------------------------------------------------ ending sign-ins
def test_a_copy_of_a_signed_out_cookie_signs_no_decision(tmp_path) -> None:
    backend = Recording()
    app = create_app(backend, ConsoleSettings(_env_file=None), _fast_accounts(tmp_path, "bob"), SECRET)
    bob = signed_in(app, "bob")
    thief = _copy(app, bob)
    token = _csrf(bob, f"/sessions/{SESSION}/review")
    assert bob.post("/logout", data={"csrf": token}).status_code == 303 and _who(bob) is None
    answer = thief.post(f"/sessions/{SESSION}/decide", data={
        "csrf": token, "turn": "1", "code_hash": VIEW.code_hash, "review": "", "kind": "run_once"})
    assert answer.status_code == 303 and answer.headers["location"].startswith("/login")
    assert backend.decided == []
    assert _who(thief) is None


def test_signing_out_ends_every_sign_in_of_the_account_and_no_other(tmp_path) -> None:
    app = create_app(StandInBackend(), ConsoleSettings(_env_file=None), _fast_accounts(tmp_path, "bob", "carol"), SECRET)
    laptop, phone, carol = signed_in(app, "bob"), signed_in(app, "bob"), signed_in(app, "carol")
    assert laptop.post("/logout", data={"csrf": _csrf(laptop, "/sessions/new")}).status_code == 303
    assert _who(phone) is None and _who(carol) == "carol"
    again = signed_in(app, "bob")
    assert _who(again) == "bob"


def test_an_old_copy_cannot_sign_the_person_out_again(tmp_path) -> None:
    app = create_app(StandInBackend(), ConsoleSettings(_env_file=None), _fast_accounts(tmp_path, "bob"), SECRET)
    bob = signed_in(app, "bob")
    thief, token = _copy(app, bob), _csrf(bob, "/sessions/new")
    bob.post("/logout", data={"csrf": token})
    bob = signed_in(app, "bob")
    thief.post("/logout", data={"csrf": token})
    assert _who(bob) == "bob"


def test_a_new_password_or_removing_the_account_ends_its_sign_ins(tmp_path) -> None:
    accounts = _fast_accounts(tmp_path, "bob")
    app = create_app(StandInBackend(), ConsoleSettings(_env_file=None), accounts, SECRET)
    before_reset = signed_in(app, "bob")
    accounts.add("bob", "a brand new password")
    assert _who(before_reset) is None
    accounts.add("bob", PASSWORD)
    before_removal = signed_in(app, "bob")
    accounts.remove("bob")
    assert _who(before_removal) is None
    accounts.add("bob", PASSWORD)  # the same name again is a new account: the old sign-ins stay ended
    assert _who(before_removal) is None and _who(before_reset) is None
    page = before_removal.get("/login").text
    assert _who(signed_in(app, "bob")) == "bob" and "sign in again" in page


def test_a_single_sign_on_copy_ends_at_sign_out(tmp_path) -> None:
    backend = Recording()
    app, oauth = _sso_app(tmp_path, backend)
    oauth.sso.claims = {"sub": "alice"}
    alice = TestClient(app, follow_redirects=False)
    alice.get("/oidc/callback?code=x&state=y")
    thief, token = _copy(app, alice), _csrf(alice, "/sessions/new")
    assert _who(thief) == "alice"
    alice.post("/logout", data={"csrf": token})
    assert _who(thief) is None
    thief.post(f"/sessions/{SESSION}/decide", data={
        "csrf": token, "turn": "1", "code_hash": VIEW.code_hash, "review": "", "kind": "run_once"})
    assert backend.decided == []


def test_a_stronger_hash_or_a_file_from_before_ends_no_sign_in(tmp_path) -> None:
    """Upgrading a hash at sign-in is not a new password; an accounts file written before sign-ins were kept in
    it still signs people in (each account's first sign-in draws its value)."""
    path = tmp_path / "users.json"
    weak = LocalAccounts(path, PasswordHasher(time_cost=1, memory_cost=8192))
    weak.add("bob", PASSWORD)
    weak.add("carol", PASSWORD)
    data = json.loads(path.read_text())
    data["accounts"]["carol"].pop("sign_ins")
    path.write_text(json.dumps(data))
    app = create_app(StandInBackend(), ConsoleSettings(_env_file=None), weak, SECRET)
    bob, carol = signed_in(app, "bob"), signed_in(app, "carol")
    stronger = LocalAccounts(path, PasswordHasher(time_cost=2, memory_cost=16384))
    assert stronger.verify("bob", PASSWORD) == "bob" and "m=16384,t=2" in path.read_text()
    assert _who(bob) == "bob" and _who(carol) == "carol"


# ------------------------------------------------------------------------------------------ password checks
def _run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def _login_token(web: httpx.AsyncClient) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', (await web.get("/login")).text).group(1)


def test_wrong_passwords_leave_the_event_loop_free(tmp_path) -> None:
    """Ten wrong passwords at once (argon2-cffi's default cost, as deployed): other work on the loop goes on."""
    accounts = LocalAccounts(tmp_path / "users.json")
    accounts.add("bob", PASSWORD)
    app = create_app(StandInBackend(), ConsoleSettings(_env_file=None), accounts, SECRET)

    async def run() -> tuple[float, float]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as web:
            token = await _login_token(web)
            gaps: list[float] = []
            done = asyncio.Event()

            async def ticker() -> None:
                last = time.monotonic()
                while not done.is_set():
                    await asyncio.sleep(0.001)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now

            tick = asyncio.create_task(ticker())
            started = time.monotonic()
            answers = await asyncio.gather(*(web.post("/login", data={
                "csrf": token, "username": f"nobody{i}", "password": "x" * 8}) for i in range(10)))
            total = time.monotonic() - started
            done.set()
            await tick
            assert [a.status_code for a in answers] == [401] * 10
            return sum(g for g in gaps if g > 0.02), total

    stalled, total = _run(run())
    assert stalled < 0.25 * total, f"the loop stood still {stalled:.2f} s of {total:.2f} s"


class _Timed(LocalAccounts):
    """Accounts whose password check takes 50 ms and counts how many run at once."""

    def __init__(self, path) -> None:
        super().__init__(path, PasswordHasher(time_cost=1, memory_cost=8192))
        self.running = self.peak = self.calls = 0
        self._count = threading.Lock()

    def verify(self, name: str, password: str) -> str | None:
        with self._count:
            self.running += 1
            self.calls += 1
            self.peak = max(self.peak, self.running)
        try:
            time.sleep(0.05)
            return super().verify(name, password)
        finally:
            with self._count:
                self.running -= 1


def test_password_checks_run_in_threads_two_at_a_time(tmp_path) -> None:
    accounts = _Timed(tmp_path / "users.json")
    app = create_app(StandInBackend(), ConsoleSettings(_env_file=None), accounts, SECRET)

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as web:
            token = await _login_token(web)
            await asyncio.gather(*(web.post("/login", data={"csrf": token, "username": f"n{i}", "password": "x" * 8})
                                   for i in range(8)))

    _run(run())
    assert accounts.calls == 8 and accounts.peak == 2


def _attempt(client: TestClient, name: str, password: str) -> httpx.Response:
    return client.post("/login", data={"csrf": _csrf(client), "username": name, "password": password, "next": "/"})


def test_repeated_failures_for_one_name_are_refused_for_a_while(tmp_path) -> None:
    settings = ConsoleSettings(_env_file=None, login_failures_per_name=3, login_failure_window_s=2)
    app = create_app(StandInBackend(), settings, _fast_accounts(tmp_path, "bob", "carol"), SECRET)
    guesser = TestClient(app, follow_redirects=False)
    assert [_attempt(guesser, name, "x" * 9).status_code for name in ("bob", "Bob", " BOB")] == [401, 401, 401]
    refused = _attempt(TestClient(app, follow_redirects=False), "bob", PASSWORD)  # the right one, from anywhere
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 2
    line = re.search(r'<p class="flash error"[^>]*>([^<]*)</p>', refused.text).group(1)
    assert re.fullmatch(r"Too many failed sign-ins for this name or from this address; try again in \d+ s\.", line)
    assert _attempt(TestClient(app, follow_redirects=False), "carol", PASSWORD).status_code == 303
    time.sleep(2.1)
    assert _attempt(TestClient(app, follow_redirects=False), "bob", PASSWORD).status_code == 303


def test_repeated_failures_from_one_address_are_refused_for_a_while(tmp_path) -> None:
    settings = ConsoleSettings(_env_file=None, login_failures_per_address=4)
    app = create_app(StandInBackend(), settings, _fast_accounts(tmp_path, "bob"), SECRET)
    there = TestClient(app, follow_redirects=False, client=("203.0.113.7", 5000))
    assert [_attempt(there, f"guess{i}", "x" * 9).status_code for i in range(4)] == [401] * 4
    assert _attempt(there, "bob", PASSWORD).status_code == 429
    elsewhere = TestClient(app, follow_redirects=False, client=("198.51.100.9", 5000))
    assert _attempt(elsewhere, "bob", PASSWORD).status_code == 303


def test_a_burst_of_guesses_at_once_is_counted_as_it_starts(tmp_path) -> None:
    accounts = _Timed(tmp_path / "users.json")
    accounts.add("bob", PASSWORD)
    app = create_app(StandInBackend(), ConsoleSettings(_env_file=None, login_failures_per_name=5), accounts, SECRET)

    async def run() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as web:
            token = await _login_token(web)
            answers = await asyncio.gather(*(web.post("/login", data={
                "csrf": token, "username": "bob", "password": f"guess {i:04d}"}) for i in range(12)))
            return sorted(a.status_code for a in answers)

    assert _run(run()) == [401] * 5 + [429] * 7
    assert accounts.calls == 5


def test_the_throttle_keeps_a_bounded_memory() -> None:
    from bamboo.frontends.console.auth import LoginThrottle

    now = [0.0]
    throttle = LoginThrottle(60, per_name=3, per_address=3, max_keys=100, clock=lambda: now[0])
    for i in range(1000):
        throttle.begin(f"10.0.{i // 250}.{i % 250}", f"name{i}")
    assert len(throttle._failures) <= 100
    now[0] = 61.0
    assert throttle.retry_after("10.9.9.9", "someone") is None and len(throttle._failures) == 0
