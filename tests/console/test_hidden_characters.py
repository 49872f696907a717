"""Names the console did not choose reach its pages spelled out: a session id is the workflow id's tail, which
whoever starts the workflow picks (Temporal takes ``alice-0001\\u202e1000\\u200b``), and batch ids, audit actors
and grant names come from outside too. A bidi override or a zero-width character in them was printed as itself,
so a row could read exactly like another session's, or reorder; now every such text goes through the ``inert``
filter (spelled ``⟨U+202E⟩``), on every page that shows it.

Also: the review's edit form sends the review digest once (it had the hidden field twice).
"""

from __future__ import annotations

from datetime import UTC, datetime
from html.parser import HTMLParser
from urllib.parse import quote

import pytest

from bamboo.frontends.console.accounts import LocalAccounts
from bamboo.frontends.console.app import create_app
from bamboo.frontends.console.backend import AuditState, BatchRow, GrantRow, SessionRow
from bamboo.frontends.console.settings import ConsoleSettings
from bamboo.investigation.client import PendingApproval
from bamboo.investigation.contract import ApprovalsView, TranscriptEntry
from bamboo.store.audit_log import ChainReport
from tests.console.test_headers import PASSWORD, SESSION, VIEW, StandInBackend, signed_in

HIDDEN = "alice-0001\u202e1000\u200b"
HIDDEN_CHARS = ("\u202e", "\u200b")


class HostileNames(StandInBackend):
    async def sessions(self, limit: int = 100):
        return [SessionRow(session_id=HIDDEN, status="running", started=datetime.now(UTC), awaiting=True)]

    async def pending(self):
        return [PendingApproval(session_id=HIDDEN, view=VIEW)]

    async def review(self, session_id):
        return VIEW

    async def transcript(self, session_id):
        return [TranscriptEntry(seq=1, at=datetime.now(UTC), kind="decision", text="chose run_once", turn=1,
                                actor=HIDDEN)]

    async def approvals(self, session_id):
        return ApprovalsView()

    async def grants(self):
        return [GrantRow(session_id=HIDDEN, kind="durable", key=HIDDEN, what=HIDDEN, by=HIDDEN)]

    async def batches(self, limit: int = 50):
        return [BatchRow(workflow_id=HIDDEN, kind="populate", status="running", started=datetime.now(UTC),
                         detail=HIDDEN)]

    async def audit_state(self, recent: int = 20):
        return AuditState(chain=ChainReport(ok=True, rows=1),
                          recent=[{"seq": 1, "at": "2026-01-01", "actor": HIDDEN, "kind": "decision", "body": {}}])


class _Shown(HTMLParser):
    """What a reader sees of a page: its text (the title included), not its markup or attribute values."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _shown(page: str) -> str:
    parser = _Shown()
    parser.feed(page)
    return "".join(parser.text)


@pytest.fixture
def console(tmp_path):
    accounts = LocalAccounts(tmp_path / "users.json")
    accounts.add("bob", PASSWORD)
    return signed_in(create_app(HostileNames(), ConsoleSettings(_env_file=None), accounts, "s" * 40), "bob")


PAGES = ["/sessions", "/approvals", f"/sessions/{quote(HIDDEN)}/review", f"/sessions/{quote(HIDDEN)}/ask",
         f"/sessions/{quote(HIDDEN)}", "/grants", "/batches", "/audit"]


@pytest.mark.parametrize("path", PAGES)
def test_a_name_from_outside_is_shown_with_its_hidden_characters_spelled_out(console, path) -> None:
    answer = console.get(path)
    assert answer.status_code == 200, answer.text
    shown = _shown(answer.text)
    assert not [c for c in HIDDEN_CHARS if c in shown], path
    assert "alice-0001⟨U+202E⟩1000⟨U+200B⟩" in shown, path


def test_the_edit_form_sends_the_review_once(tmp_path) -> None:
    accounts = LocalAccounts(tmp_path / "users.json")
    accounts.add("bob", PASSWORD)
    client = signed_in(create_app(StandInBackend(), ConsoleSettings(_env_file=None), accounts, "s" * 40), "bob")
    page = client.get(f"/sessions/{SESSION}/review").text
    edit = page[page.index('<details id="edit">'):page.index("</details>")]
    assert edit.count('name="review"') == 1 and page.count('name="review"') == 2
