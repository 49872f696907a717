"""`make demo` runs the main job end to end: when its investigation does not reach a review (no worker answers,
or the session refuses the question), the demo says where it stopped in one line and exits non-zero (it printed
the reason, went on to "Where to look" and exited 0: a broken demo looked like a good one)."""

from __future__ import annotations

import asyncio

import pytest
import typer

from bamboo.cli import demo_loop
from bamboo.investigation import client as inv
from bamboo.settings import Settings


class _Silent:
    """A session whose worker never answers: no review, no transcript."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse

    async def start(self, inp) -> str:
        return inp.session_id

    async def transcript(self, session_id: str, since: int = 0) -> list:
        return []

    async def message(self, *args, **kwargs):
        if self.refuse:
            raise inv.InvestigationError("demo-requester is not registered to ask for code here", refusal="missing_role")

    async def pending(self, session_id: str):
        return None


async def _nothing(*args, **kwargs):
    return []


@pytest.mark.parametrize("refuse", [False, True])
def test_the_demo_exits_non_zero_when_its_investigation_stops(monkeypatch, tmp_path, capsys, refuse):
    monkeypatch.setattr(demo_loop, "TURN_TIMEOUT_S", 0.3)
    monkeypatch.setattr(demo_loop, "provision_demo_identities", _nothing)
    monkeypatch.setattr(demo_loop, "store_example_procedures", _nothing)
    monkeypatch.setattr(demo_loop, "connect", _nothing)
    monkeypatch.setattr(demo_loop.inv, "InvestigationClient", lambda temporal: _Silent(refuse))
    monkeypatch.setattr(demo_loop.inv.Speaker, "of", classmethod(lambda cls, settings, who: inv.Speaker(
        who, deployment="embedded")))
    settings = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    with pytest.raises(typer.Exit) as stopped:
        asyncio.run(demo_loop._walk(settings, demo_loop.DEMO_TASK, "me", None))
    assert stopped.value.exit_code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "stopped at turn 1" in err and "worker.log" in err
    assert ("missing_role" in err) if refuse else ("nothing to review" in err)
