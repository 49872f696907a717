"""`bamboo approve SESSION HASH y` signs the turn and full hash of whatever is pending under the typed hash. Whoever
may edit the pending code (its requester, any holder of the request role) could prepare two bodies whose hashes
share a short prefix — eight hex characters take a fraction of a second — show an approver the harmless one and
swap in the other before the approval is sent: the approver's signature then covered code they never read. A
prefix is now at least 32 hex characters (128 bits: no two bodies can be made to share it)."""

from __future__ import annotations

import pytest

from bamboo.investigation import client as inv
from bamboo.investigation.contract import PendingMemo
from policy.code_identity import code_hash
from policy.decisions import DecisionKind

HARMLESS = "r = await tools.retry_task(task_id=task_id)\n# {}\nreturn {{'retried': r['accepted']}}"
HARMFUL = "r = await tools.kill_task(task_id=task_id)\n# {}\nreturn {{'killed': r['accepted']}}"


def colliding_pair(chars: int) -> tuple[str, str]:
    """A harmless and a harmful body whose hashes share their first ``chars`` hex characters (a birthday search)."""
    harmless: dict[str, str] = {}
    harmful: dict[str, str] = {}
    for i in range(1 << 22):
        a, b = HARMLESS.format(i), HARMFUL.format(i)
        harmless[code_hash(a)[:chars]], harmful[code_hash(b)[:chars]] = a, b
        if code_hash(a)[:chars] in harmful:
            return a, harmful[code_hash(a)[:chars]]
        if code_hash(b)[:chars] in harmless:
            return harmless[code_hash(b)[:chars]], b
    raise AssertionError("no collision found")


async def test_an_approval_typed_for_the_code_read_cannot_sign_code_swapped_in_under_the_same_short_prefix(monkeypatch):
    read, swapped = colliding_pair(8)
    assert code_hash(read)[:8] == code_hash(swapped)[:8] and code_hash(read) != code_hash(swapped)
    pending_now = PendingMemo(turn=3, code_hash=code_hash(swapped), requester="rita", read_only=False)
    signed: list = []

    async def pending(client, session_id, timeout_s=None):
        return pending_now

    async def deliver_decision(client, session_id, decision, speaker, **_):
        signed.append(decision)
        return inv.Delivery(name=inv.Message.DECIDE, turn=decision.turn, code_hash=decision.code_hash)

    monkeypatch.setattr(inv, "pending", pending)
    monkeypatch.setattr(inv, "deliver_decision", deliver_decision)
    approver = inv.Speaker("xavier", deployment="default")
    for typed in (code_hash(read)[:8], code_hash(read)[:31], "", "zz" * 20):
        with pytest.raises(inv.InvestigationError, match="at least 32 hex characters"):
            await inv.decide_by_prefix(None, "s1", typed, DecisionKind.RUN_ONCE, approver)  # type: ignore[arg-type]
    with pytest.raises(inv.InvestigationError, match="not " + code_hash(read)[:32]):
        await inv.decide_by_prefix(None, "s1", code_hash(read)[:32], DecisionKind.RUN_ONCE, approver)  # type: ignore[arg-type]
    assert signed == []
    delivered = await inv.decide_by_prefix(None, "s1", code_hash(swapped)[:32].upper(), DecisionKind.RUN_ONCE, approver)  # type: ignore[arg-type]
    assert [d.code_hash for d in signed] == [code_hash(swapped)] and delivered.turn == 3
