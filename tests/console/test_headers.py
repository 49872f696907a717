"""Every console response forbids framing and script: each route of the real app (signed in and signed out,
every method it takes), the static files, the sign-in page, and the error pages (404, 405, 403, 409, 401
and a 500 from a failing backend).

Another origin once framed a signed-in review page. The app here is the one ``bamboo console`` serves, with
a stand-in backend so that the pages render without Temporal; tests/console/test_browser.py shows the same
headers stopping a real browser.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from bamboo.frontends.console.accounts import LocalAccounts
from bamboo.frontends.console.app import create_app
from bamboo.frontends.console.backend import AuditState, ConsoleError, GrantRow, SessionRow
from bamboo.frontends.console.settings import ConsoleSettings
from bamboo.investigation.client import PendingApproval
from bamboo.investigation.contract import ApprovalsView, PendingView
from bamboo.store.audit_log import ChainReport
from bamboo.store.knowledge_browse import CauseDetail, CausePage, CauseSummary
from policy.approvers import Role
from policy.decisions import ALL_CHOICES

PASSWORD = "correct horse battery"
SESSION = "alice-0001"
TEMPLATES = Path(__file__).resolve().parents[2] / "bamboo" / "frontends" / "console" / "templates"
VIEW = PendingView(
    session_id=SESSION, turn=1, code_hash="ab" * 32, code="t = await tools.get_task_details(task_id=1)\nreturn t",
    summary="look at the task", requester="alice", read_only=True, tools=["get_task_details"], reason="new_code",
    detail="New code is always reviewed before it runs.", choices=list(ALL_CHOICES),
    allow_set=["get_task_details"],
)


class StandInBackend:
    """Answers every page's questions with one pending review; every action is refused, as a session may."""

    def __init__(self) -> None:
        self.fail = False

    async def roles(self, identity: str) -> list[Role] | None:
        return [Role.REQUEST, Role.APPROVE]

    async def account_identity(self, account: str) -> str | None:
        return account

    async def pending(self) -> list[PendingApproval]:
        return [PendingApproval(session_id=SESSION, view=VIEW)]

    async def review(self, session_id: str) -> PendingView | None:
        return VIEW if session_id == SESSION else None

    async def transcript(self, session_id: str) -> list:
        return []

    async def sessions(self, limit: int = 100) -> list[SessionRow]:
        return [SessionRow(session_id=SESSION, status="running", started=datetime.now(UTC), awaiting=True)]

    async def session_status(self, session_id: str) -> str:
        return "running"

    async def approvals(self, session_id: str) -> ApprovalsView:
        return ApprovalsView()

    async def grants(self) -> list[GrantRow]:
        return []

    async def batches(self, limit: int = 50) -> list:
        return []

    async def audit_state(self, recent: int = 20) -> AuditState:
        if self.fail:
            raise RuntimeError("the store went away")
        return AuditState(chain=ChainReport(ok=True, rows=0))

    async def knowledge(self, query: str = "", offset: int = 0, limit: int = 25) -> CausePage:
        return CausePage(query=query, offset=offset, limit=limit, total=1,
                         causes=[CauseSummary(id=1, name="Insufficient memory request", incidents=3)])

    async def cause(self, cause_id: int) -> CauseDetail | None:
        return None

    async def _refuse(self, *args, **kwargs):
        raise ConsoleError("refused by the stand-in backend", refusal="test")

    decide = ask = revoke = start = control_batch = _refuse


@pytest.fixture
def console(tmp_path):
    accounts = LocalAccounts(tmp_path / "users.json")
    accounts.add("bob", PASSWORD)
    backend = StandInBackend()
    app = create_app(backend, ConsoleSettings(_env_file=None), accounts, "test-cookie-secret-" + "x" * 24)
    return app, backend


def signed_in(app, name: str = "bob") -> TestClient:
    """A client of the app signed in as `name` (an account the test added with PASSWORD)."""
    client = TestClient(app, raise_server_exceptions=False, follow_redirects=False)
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text).group(1)
    answer = client.post("/login", data={"csrf": token, "username": name, "password": PASSWORD, "next": "/"})
    assert answer.status_code == 303, answer.text
    return client


def _csrf(client: TestClient, page: str = "/sessions/new") -> str:
    return re.search(r'name="csrf" value="([^"]+)"', client.get(page).text).group(1)


def _directives(policy: str) -> dict[str, list[str]]:
    parts = [part.split() for part in policy.split(";") if part.strip()]
    return {words[0]: words[1:] for words in parts}


def assert_protected(response) -> None:
    where = f"{response.request.method} {response.request.url.path} -> {response.status_code}"
    assert response.headers.get("x-frame-options") == "DENY", where
    assert response.headers.get("x-content-type-options") == "nosniff", where
    assert response.headers.get("referrer-policy") == "same-origin", where  # no-referrer makes forms' Origin null
    policy = _directives(response.headers.get("content-security-policy", ""))
    assert policy.get("frame-ancestors") == ["'none'"], where
    assert policy.get("script-src") == ["'none'"], where
    assert policy.get("object-src") == ["'none'"] and policy.get("base-uri") == ["'none'"], where
    assert policy.get("form-action") == ["'self'"], where
    assert policy.get("default-src") in (["'none'"], ["'self'"]), where
    for directive, sources in policy.items():
        assert set(sources) <= {"'none'", "'self'"}, f"{where}: {directive} allows {sources}"
    if response.headers.get("content-type", "").startswith("text/html"):
        # The policy forbids them, so a page that had them would silently lose them.
        assert not re.search(r"<script|<style|\sstyle=|\son[a-z]+=|javascript:", response.text, re.IGNORECASE), where


def _requests(app) -> list[tuple[str, str]]:
    """(method, path) for every route and method the app declares, with a path parameter filled in."""
    found = []
    for route in app.routes:
        if isinstance(route, Route):
            path = route.path.replace("{session}", SESSION).replace("{cause_id:int}", "1")
            found.extend((method, path) for method in sorted(route.methods or {"GET"}))
        elif isinstance(route, Mount):
            found.extend([("GET", f"{route.path}/console.css"), ("GET", f"{route.path}/no-such-file.css")])
    return found


def test_every_route_forbids_framing_and_script_signed_in_or_not(console) -> None:
    app, _ = console
    requests = _requests(app)
    assert {path for _, path in requests} >= {"/login", f"/sessions/{SESSION}/review", "/static/console.css",
                                              "/knowledge", "/knowledge/causes/1"}
    anonymous = TestClient(app, raise_server_exceptions=False, follow_redirects=False)
    seen: set[int] = set()
    for method, path in requests:
        assert_protected(anonymous.request(method, path))
        bob = signed_in(app)  # afresh each time: one of the routes signs out
        response = bob.request(method, path, data={"csrf": _csrf(bob)} if method == "POST" else None)
        assert_protected(response)
        seen.add(response.status_code)
    review = signed_in(app).get(f"/sessions/{SESSION}/review")
    assert review.status_code == 200 and VIEW.code_hash in review.text  # the page worth framing, rendered
    assert {200, 303, 403, 404, 409} <= seen, seen


def test_error_pages_and_the_sign_in_page_forbid_framing_and_script(console) -> None:
    app, backend = console
    anonymous, bob = TestClient(app, raise_server_exceptions=False, follow_redirects=False), signed_in(app)
    answers = {
        "sign-in page": anonymous.get("/login"),
        "wrong password": anonymous.post("/login", data={"csrf": _csrf(anonymous, "/login"), "username": "bob",
                                                         "password": "not the password"}),
        "no such page": bob.get("/no/such/page"),
        "wrong method": bob.delete("/approvals"),
        "no form token": bob.post(f"/sessions/{SESSION}/decide", data={"turn": "1"}),
        "another origin": bob.post("/logout", data={"csrf": _csrf(bob)}, headers={"Origin": "http://evil.example"}),
        "refused action": bob.post("/sessions/new", data={"csrf": _csrf(bob), "task_id": "1"}),
        "sso not configured": bob.get("/oidc/login"),
    }
    backend.fail = True
    answers["server error"] = bob.get("/audit")
    statuses = {name: response.status_code for name, response in answers.items()}
    assert statuses == {"sign-in page": 200, "wrong password": 401, "no such page": 404, "wrong method": 405,
                        "no form token": 403, "another origin": 403, "refused action": 409,
                        "sso not configured": 404, "server error": 500}, statuses
    for response in answers.values():
        assert_protected(response)


def test_no_template_relies_on_script_or_inline_style() -> None:
    """The policy allows neither, so the console's templates must need neither (the screenshots stay true)."""
    for template in sorted(TEMPLATES.glob("*.html")):
        text = template.read_text()
        assert not re.search(r"<script|<style|\sstyle=|\son[a-z]+=|javascript:", text, re.IGNORECASE), template.name


@pytest.mark.parametrize(("public_url", "secure", "expected"), [
    ("https://console.example.org", None, True), ("http://127.0.0.1:8240", None, False), (None, None, False),
    ("https://console.example.org", False, False), ("http://127.0.0.1:8240", True, True),
])
def test_the_session_cookie_is_https_only_where_people_reach_the_console_over_https(tmp_path, public_url, secure,
                                                                                    expected) -> None:
    accounts = LocalAccounts(tmp_path / "users.json")
    accounts.add("bob", PASSWORD)
    settings = ConsoleSettings(_env_file=None, public_url=public_url, secure_cookies=secure)
    client = TestClient(create_app(StandInBackend(), settings, accounts, "test-cookie-secret-" + "x" * 24),
                        base_url="https://testserver", follow_redirects=False)
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text).group(1)
    answer = client.post("/login", data={"csrf": token, "username": "bob", "password": PASSWORD, "next": "/"},
                         headers={"origin": "https://testserver"})
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("bamboo_console=") and ("; secure" in cookie.lower()) is expected
