"""The console's knowledge pages (issue 27): the known causes with their counts, resolutions and steps, a text
filter and pages; one cause with its incidents, resolutions and steps, each with where it came from. Read-only,
for anyone signed in; everything shown came from incident text or a model and is rendered inert.

The app is the one ``bamboo console`` serves, with a stand-in backend (no Temporal, no store); the browser test
in test_operations.py reads the same pages from a real store.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from bamboo.frontends.console.accounts import LocalAccounts
from bamboo.frontends.console.app import create_app
from bamboo.frontends.console.settings import ConsoleSettings
from bamboo.store.knowledge_browse import (
    CauseDetail, CausePage, CauseSummary, IncidentRef, ProcedureStep, Resolution,
)
from policy.approvers import Role
from tests.console.test_headers import PASSWORD, signed_in
from tests.console.test_model_text import _hidden

# Named as hostile model output may name a cause: HTML, a Markdown link and emphasis, a bidi override, a
# zero-width space and a terminal escape.
HOSTILE = ("<script>alert(1)</script> [read-only](http://evil.example/) **bold** <img src=x onerror=alert(1)> "
           "\u202eevil\u202c admin\u200b \x1b[2J")
HOSTILE_ID = 7


def _summary(cause_id: int, name: str, incidents: int) -> CauseSummary:
    return CauseSummary(id=cause_id, name=name, description=f"{name} <i>described</i>", incidents=incidents,
                        resolutions=[f"[fix](http://evil.example/{cause_id})", "Retry"], resolution_count=5,
                        step_count=2)


class KnowledgeBackend:
    """What the pages ask of the store, answered from memory; it records the questions."""

    def __init__(self, causes: int = 60) -> None:
        self.summaries = [_summary(HOSTILE_ID, HOSTILE, 90)] + [
            _summary(100 + i, f"cause {i:02d}", 50 - i // 2) for i in range(causes - 1)]
        self.asked: list[tuple[str, int, int]] = []

    async def roles(self, identity: str) -> list[Role] | None:
        return []

    async def account_identity(self, account: str) -> str | None:
        return account

    async def knowledge(self, query: str = "", offset: int = 0, limit: int = 25) -> CausePage:
        self.asked.append((query, offset, limit))
        found = [c for c in self.summaries if query.lower() in c.name.lower()]
        return CausePage(query=query, offset=offset, limit=limit, total=len(found),
                         causes=found[offset:offset + limit])

    async def cause(self, cause_id: int) -> CauseDetail | None:
        summary = next((c for c in self.summaries if c.id == cause_id), None)
        if summary is None:
            return None
        sources = [f"panda:{40000000 + n}:failed" for n in range(20)]
        return CauseDetail(
            cause=summary,
            incidents=[IncidentRef(graph_id=g, incident_id=f"inc <b>{n}</b>", task_id=40000000 + n,
                                   stored_at=datetime(2026, 12, 1, tzinfo=UTC)) for n, g in enumerate(sources)],
            resolutions=[Resolution(name="[Raise ramCount](http://evil.example/) <b>now</b>", incidents=45,
                                    sources=sources),
                         Resolution(name="Retry", incidents=3, sources=sources[:3])],
            steps=[ProcedureStep(name="`rm -rf /` <script>x</script>", order=1, incidents=90, sources=sources),
                   ProcedureStep(name="Check the scout jobs' maxPSS", order=2, incidents=2, sources=sources[:2])])


@pytest.fixture
def console(tmp_path):
    accounts = LocalAccounts(tmp_path / "users.json")
    accounts.add("reader", PASSWORD)
    backend = KnowledgeBackend()
    return create_app(backend, ConsoleSettings(_env_file=None), accounts, "test-cookie-secret-" + "x" * 24), backend


def assert_protected(response) -> None:
    """The headers every console response carries (tests/console/test_headers.py checks them on every route;
    its body check would take the escaped ``onerror=`` these pages show for markup)."""
    assert response.headers["x-frame-options"] == "DENY"
    assert "script-src 'none'" in response.headers["content-security-policy"]


def _assert_inert(page: str) -> None:
    assert not _hidden(page), _hidden(page)
    assert "<script>alert" not in page and "<script>x" not in page and "<img src=x" not in page
    assert "<b>now" not in page and "<b>0" not in page and "<i>" not in page and 'href="http://evil' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; [read-only](http://evil.example/) **bold**" in page
    assert "⟨U+202E⟩evil⟨U+202C⟩ admin⟨U+200B⟩ ⟨U+001B⟩[2J" in page


def test_the_knowledge_pages_need_a_sign_in_and_nothing_more(console) -> None:
    """Any signed-in person reads them, registered for a role or not (this one holds none)."""
    app, _ = console
    anonymous = TestClient(app, raise_server_exceptions=False, follow_redirects=False)
    for path in ("/knowledge", f"/knowledge/causes/{HOSTILE_ID}"):
        answer = anonymous.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == f"/login?next={path}"
    reader = signed_in(app, "reader")
    for path in ("/knowledge", f"/knowledge/causes/{HOSTILE_ID}"):
        page = reader.get(path)
        assert page.status_code == 200 and 'id="nav-knowledge"' in page.text, path
        assert_protected(page)


def test_the_list_shows_counts_resolutions_and_steps_one_bounded_page_at_a_time(console) -> None:
    app, backend = console
    reader = signed_in(app, "reader")
    first = reader.get("/knowledge").text
    assert backend.asked[-1] == ("", 0, 25)
    rows = re.findall(r'<tr class="cause" data-cause="(\d+)">', first)
    assert len(rows) == 25 and rows[0] == str(HOSTILE_ID)
    assert "Causes 1–25 of 60" in first and f'href="/knowledge/causes/{HOSTILE_ID}"' in first
    assert '<td class="count">90</td>' in first and "and 3 more" in first
    assert 'href="/knowledge?page=2" id="next"' in first and 'id="prev"' not in first

    third = reader.get("/knowledge?page=3").text
    assert backend.asked[-1] == ("", 50, 25) and "Causes 51–60 of 60" in third
    assert 'href="/knowledge?page=2" id="prev"' in third and 'id="next"' not in third
    for garbage in ("0", "-1", "x", "²", "99999999999999999999"):
        reader.get(f"/knowledge?page={garbage}")
        assert backend.asked[-1] == ("", 0, 25), garbage

    filtered = reader.get("/knowledge", params={"q": "  CAUSE 0", "page": "1"}).text
    assert backend.asked[-1] == ("CAUSE 0", 0, 25)
    assert "Causes 1–10 of 10 matching “CAUSE 0”" in filtered and 'value="CAUSE 0"' in filtered
    reader.get("/knowledge", params={"q": "x" * 5000})
    assert backend.asked[-1][0] == "x" * 200  # the filter is bounded as the store's reads are
    nothing = reader.get("/knowledge", params={"q": "<b>nothing</b>"}).text
    assert "No known cause matches “&lt;b&gt;nothing&lt;/b&gt;”" in nothing


def test_a_cause_shows_its_incidents_resolutions_and_steps_with_their_provenance(console) -> None:
    app, _ = console
    reader = signed_in(app, "reader")
    page = reader.get(f"/knowledge/causes/{HOSTILE_ID}").text
    resolutions = page[page.index('id="resolutions"'):page.index('id="steps"')]
    assert "&lt;b&gt;now&lt;/b&gt;" in resolutions and "panda:40000000:failed, panda:40000001:failed" in resolutions
    assert "and 25 more" in resolutions  # 45 incidents, 20 shown
    steps = page[page.index('id="steps"'):page.index('id="incidents"')]
    assert steps.index("`rm -rf /` &lt;script&gt;x&lt;/script&gt;") < steps.index("Check the scout jobs")
    assert "and 70 more" in steps
    assert "The first 20 of 90, by graph id." in page and "inc &lt;b&gt;0&lt;/b&gt;" in page
    missing = reader.get("/knowledge/causes/8")
    assert missing.status_code == 404 and "There is no cause 8" in missing.text
    assert reader.get("/knowledge/causes/not-a-number").status_code == 404
    assert_protected(missing)


def test_a_hostile_cause_renders_inert_on_both_pages(console) -> None:
    """A cause named with HTML, Markdown link syntax, a bidi override and a terminal escape is shown as those
    characters: escaped, the invisible ones spelled out, no tag, no link but the console's own."""
    app, _ = console
    reader = signed_in(app, "reader")
    listing = reader.get("/knowledge").text
    detail = reader.get(f"/knowledge/causes/{HOSTILE_ID}").text
    for page in (listing, detail):
        _assert_inert(page)
        links = re.findall(r'href="([^"]*)"', page)
        assert all(link.startswith("/") for link in links), links
    assert "[fix](http://evil.example/7)" in listing
