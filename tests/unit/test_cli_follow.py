"""The attached terminal follows its own message: another client's refusal, or the refusal of its own copy as a
replay, is not the answer to it (issue: a message whose update timed out went again as a signal; the copy was
refused as "already used" and the terminal stopped following before the review came)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from bamboo.cli import investigate_cmd
from bamboo.investigation import client as inv
from bamboo.investigation.contract import TranscriptEntry

MINE = "nonce-of-my-message"


def _entry(seq: int, kind: str, text: str, **extra) -> TranscriptEntry:
    return TranscriptEntry(seq=seq, at=datetime.now(UTC), kind=kind, text=text, **extra)  # type: ignore[arg-type]


class _Ops:
    """The transcript as the session writes it, one entry per poll; nothing ever pending."""

    def __init__(self, entries: list[TranscriptEntry]) -> None:
        self.entries = entries
        self.polls = 0

    async def transcript(self, session_id: str, after: int) -> list[TranscriptEntry]:
        self.polls += 1
        return [e for e in self.entries if after < e.seq <= self.polls]

    async def pending(self, session_id: str):
        return None


class _Speaker:
    identity = "alice"


def _followed(entries: list[TranscriptEntry], nonce: str | None = MINE) -> int:
    """How many polls the terminal made before it stopped following "status?"."""
    ops = _Ops(entries)
    loop = investigate_cmd.SessionLoop(ops, "s", _Speaker(), False, None)  # type: ignore[arg-type]
    sent = inv.Delivery(name=inv.Message.MESSAGE, durable=True, nonce=nonce)
    assert asyncio.run(loop.follow_until_idle(expect_turn="status?", sent=sent)) is True
    return ops.polls


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setattr(investigate_cmd, "POLL_S", 0.0)
    monkeypatch.setattr(investigate_cmd, "print_entry", lambda entry, verbose: None)
    monkeypatch.setattr(investigate_cmd.SessionLoop, "_pending", lambda self: _none())


async def _none():
    return None


def _answered() -> list[TranscriptEntry]:
    return [_entry(3, "operator", "status?", turn=1, actor="alice"), _entry(4, "reply", "it is broken", turn=1)]


def test_the_refusal_of_a_copy_of_my_message_as_a_replay_does_not_end_it() -> None:
    copy = _entry(1, "refused_request", "message from alice refused: already used", actor="alice",
                  data={"refusal": "replayed", "nonce": MINE})
    assert _followed([copy, _entry(2, "intent", "reading"), *_answered()]) >= 4


def test_another_clients_refusal_does_not_end_my_message() -> None:
    theirs = _entry(1, "refused_request", "message from bob refused: bad signature", actor="bob",
                    data={"refusal": "bad_signature", "nonce": "bobs"})
    assert _followed([theirs, _entry(2, "intent", "reading"), *_answered()]) >= 4


def test_the_refusal_of_my_message_ends_it() -> None:
    mine = _entry(1, "refused_request", "message from alice refused: missing role", actor="alice",
                  data={"refusal": "missing_role", "nonce": MINE})
    assert _followed([mine, *_answered()]) == 1


def test_unsigned_the_refusal_is_mine_when_it_names_me() -> None:
    theirs = _entry(1, "refused_request", "message from bob refused", actor="bob", data={"refusal": "closed", "nonce": None})
    mine = _entry(2, "refused_request", "message from alice refused", actor="alice",
                  data={"refusal": "closed", "nonce": None})
    assert _followed([theirs, mine, *_answered()], nonce=None) == 2


def test_a_turn_that_ends_in_the_workflow_s_notice_ends_it() -> None:
    """A rejection or "no code to review" is the workflow's notice, not a reply: the terminal stops on it too."""
    said = [_entry(1, "operator", "status?", turn=1, actor="alice"),
            _entry(2, "notice", "No code to review: the model wrote none this turn.", turn=1)]
    assert _followed(said) == 2
