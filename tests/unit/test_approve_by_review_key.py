"""`bamboo approve SESSION KEY y` signs the turn, full code hash and review of whatever is pending under the typed
key. Two ways it could sign something its approver never read:

- Looked up by code hash, it signed whichever review of that code waited: an edit and its undo bring the same code
  back in the same turn, reviewed again against procedure rows its requester may have rewritten, so the approver
  who read the first review signed the second. The key typed is now the review's (``PendingView.review``, which
  covers the code hash); a code hash is refused with a line saying which key to give.
- Whoever may edit the pending code could prepare two bodies (or two reviews) whose keys share a short prefix —
  eight hex characters take a fraction of a second — show the approver one and swap in the other before the
  approval is sent. A key is at least 32 hex characters (128 bits: none can be made to share it)."""

from __future__ import annotations

import pytest

from bamboo.investigation import client as inv
from bamboo.investigation.contract import PendingMemo
from policy.code_identity import code_hash
from policy.decisions import DecisionKind, review_digest

KILL = "r = await tools.kill_task(task_id=task_id)\nreturn {'killed': r['accepted']}"


def review_of(code: str, pinned_body: str) -> str:
    return review_digest(run="first-run", code_hash=code_hash(code), read_only=False, choices=[DecisionKind.RUN_ONCE], grants=[],
                         allow_set=["kill_task"], procedure_hashes={"proc__check": code_hash(pinned_body)},
                         read_only_tools=[])


def colliding_reviews(chars: int) -> tuple[str, str]:
    """Two reviews of the same code, with different pinned bodies, whose keys share their first ``chars`` hex
    characters (a birthday search over the body a requester may write)."""
    seen: dict[str, str] = {}
    for i in range(1 << 22):
        key = review_of(KILL, f"return {i}")
        if key[:chars] in seen:
            return seen[key[:chars]], key
        seen[key[:chars]] = key
    raise AssertionError("no collision found")


@pytest.fixture
def signed(monkeypatch) -> tuple[list, list]:
    """(what is pending now, what got signed): the session's query and delivery replaced by these lists."""
    pending_now: list[PendingMemo] = []
    sent: list = []

    async def pending(client, session_id, timeout_s=None, first_run=None):
        return pending_now[-1]

    async def deliver_decision(client, session_id, decision, speaker, **_):
        sent.append(decision)
        return inv.Delivery(name=inv.Message.DECIDE, turn=decision.turn, code_hash=decision.code_hash)

    monkeypatch.setattr(inv, "pending", pending)
    monkeypatch.setattr(inv, "deliver_decision", deliver_decision)
    return pending_now, sent


APPROVER = inv.Speaker("xavier", deployment="default")


async def test_the_key_of_the_review_read_does_not_sign_the_same_code_reviewed_again(signed):
    pending_now, sent = signed
    read = review_of(KILL, "return 'read-only check'")
    pending_now.append(PendingMemo(turn=3, code_hash=code_hash(KILL), requester="rita", read_only=False,
                                   review=review_of(KILL, "await tools.kill_task(task_id=1)")))
    for typed, refusal in ((read, "reviewed again or moved on"), (code_hash(KILL), "not its review key")):
        with pytest.raises(inv.InvestigationError, match=refusal):
            await inv.decide_by_review(None, "s1", typed, DecisionKind.RUN_ONCE, APPROVER)  # type: ignore[arg-type]
    assert sent == []
    pending_now.append(pending_now[-1].model_copy(update={"review": read}))
    delivered = await inv.decide_by_review(None, "s1", read[:32].upper(), DecisionKind.RUN_ONCE, APPROVER)  # type: ignore[arg-type]
    assert [(d.code_hash, d.review) for d in sent] == [(code_hash(KILL), read)] and delivered.turn == 3


async def test_a_key_typed_for_the_review_read_cannot_sign_one_swapped_in_under_the_same_short_prefix(signed):
    pending_now, sent = signed
    read, swapped = colliding_reviews(8)
    assert read[:8] == swapped[:8] and read != swapped
    pending_now.append(PendingMemo(turn=3, code_hash=code_hash(KILL), requester="rita", read_only=False,
                                   review=swapped))
    for typed in (read[:8], read[:31], "", "zz" * 20):
        with pytest.raises(inv.InvestigationError, match="at least 32 hex characters"):
            await inv.decide_by_review(None, "s1", typed, DecisionKind.RUN_ONCE, APPROVER)  # type: ignore[arg-type]
    with pytest.raises(inv.InvestigationError, match="reviewed again or moved on"):
        await inv.decide_by_review(None, "s1", read[:32], DecisionKind.RUN_ONCE, APPROVER)  # type: ignore[arg-type]
    assert sent == []


def test_signing_an_answer_that_runs_code_needs_the_review_read(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from bamboo.cli.main import app

    monkeypatch.setenv("BAMBOO_DATA_DIR", str(tmp_path))
    out = CliRunner().invoke(app, ["sign", "decide", "s1", code_hash(KILL), "y", "--as", "xavier", "--turn", "3"])
    assert out.exit_code != 0 and "name the review you read: --review KEY" in out.output


@pytest.mark.parametrize("read_only, offered", [(True, "y|n"), (False, " n`")])
def test_code_no_worker_can_show_is_offered_for_approval_only_when_read_only(monkeypatch, tmp_path, read_only, offered):
    """With no worker, `bamboo approvals` names what waits from the session's memo. It invited 'y' for
    state-changing code nobody could read yet; only its rejection is offered now."""
    from typer.testing import CliRunner

    from bamboo.cli import investigate_cmd
    from bamboo.cli.main import app

    memo = PendingMemo(turn=2, code_hash=code_hash(KILL), requester="rita", read_only=read_only,
                       review=review_of(KILL, "return 1"))

    async def connect(settings):
        return None

    async def list_pending(self, limit=100, unanswered=None):
        unanswered.append("s1")
        return []

    async def pending_memo(self, session_id):
        return memo

    monkeypatch.setattr(investigate_cmd, "_connect", connect)
    monkeypatch.setattr(inv.InvestigationClient, "list_pending", list_pending)
    monkeypatch.setattr(inv.InvestigationClient, "pending_memo", pending_memo)
    monkeypatch.setenv("BAMBOO_DATA_DIR", str(tmp_path))
    out = CliRunner().invoke(app, ["approvals"])
    said = " ".join(out.output.split())
    assert out.exit_code == 1 and f"bamboo approve s1 {memo.review[:32]} {offered.strip(' `')}" in said, said
    assert ("read its code once a worker answers" in said) is not read_only


def test_a_signature_is_never_signed_for_longer_than_the_deployment_takes(tmp_path, monkeypatch):
    """A longer one is refused by the workflow, yet kept in its history: written into a grant row later, a
    revocation (which covers answers expiring within the longest lifetime) did not cover it."""
    from typer.testing import CliRunner

    from bamboo.cli.main import app

    from bamboo.settings import get_settings

    monkeypatch.setenv("BAMBOO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("BAMBOO_MAX_SIGNATURE_TTL_S", "3600")
    get_settings.cache_clear()
    try:
        out = CliRunner().invoke(app, ["sign", "message", "s1", "hello", "--as", "xavier", "--ttl", "7200"])
    finally:
        get_settings.cache_clear()
    assert out.exit_code != 0 and "over this deployment's longest signature lifetime (3600 s" in out.output
