"""The per-model calibration benchmark (bench/diagnosis/model_calibration.py) scores what the product would
answer: the model's judged answer when it comes within the deadline, the ranking's when it is too slow or
its step fails, and no model call for a task without candidates. A fake model client, no stack."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from bamboo.analysis.contract import CandidateCause, Clue, Evidence, MatchedClue, TaskClues
from bench.diagnosis.model_calibration import row, second_opinions

SYMPTOM = Clue(type="symptom", kind="Symptom", name="InsufficientMemory", text="out of memory")
TOP = CandidateCause(name="Insufficient memory request", breadth=2, support=1.2, frequency=8, confidence=1.0,
                     matched=[MatchedClue(type="symptom", name="InsufficientMemory", edge_frequency=8, share=0.8)])


class FakeModel:
    """Answers `cause` after `delay` seconds, or raises when `fail`."""

    def __init__(self, delay: float = 0.0, fail: bool = False, cause: str = TOP.name) -> None:
        self.delay, self.fail, self.cause, self.calls = delay, fail, cause, 0

    async def structured(self, *, system: str, user: str, output: type[BaseModel], name: str, **_: Any) -> BaseModel:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("model endpoint refused the connection")
        return output.model_validate({"cause": self.cause, "confidence": 0.9, "cited_clues": ["InsufficientMemory"],
                                      "reason": "the memory symptom", "explanation": "memory"})


EVIDENCE = Evidence(clues=TaskClues(clues=[SYMPTOM]), candidates=[TOP])
NOTHING = Evidence(clues=TaskClues(clues=[SYMPTOM]), candidates=[])
TRUTHS = [("insufficient memory request", False, False)]


async def test_an_answer_within_the_deadline_is_judged_and_counted() -> None:
    run = await second_opinions(FakeModel(), [EVIDENCE], TRUTHS, 8, 5.0, "fake")  # type: ignore[arg-type]
    assert (run.in_time, run.too_slow, run.failed) == (1, 0, 0) and run.verdicts["agreed"] == 1
    assert run.rows[0].cause == TOP.name


async def test_a_model_slower_than_the_deadline_leaves_the_rankings_answer() -> None:
    run = await second_opinions(FakeModel(delay=1.0), [EVIDENCE], TRUTHS, 8, 0.05, "fake")  # type: ignore[arg-type]
    assert (run.in_time, run.too_slow, run.failed) == (0, 1, 0) and not run.verdicts
    assert run.rows[0].cause == TOP.name and run.rows[0].confidence < 1.0, "the ranking's answer and confidence"


async def test_a_failed_model_step_leaves_the_rankings_answer_and_no_candidates_asks_no_model() -> None:
    model = FakeModel(fail=True)
    run = await second_opinions(model, [EVIDENCE, NOTHING], TRUTHS * 2, 8, 5.0, "fake")  # type: ignore[arg-type]
    assert (run.in_time, run.too_slow, run.failed) == (0, 0, 1) and model.calls == 1
    assert run.rows[0].cause == TOP.name and run.rows[1].cause is None


async def test_the_table_counts_the_overrides_the_judge_accepted() -> None:
    run = await second_opinions(FakeModel(), [EVIDENCE], TRUTHS, 8, 5.0, "fake")  # type: ignore[arg-type]
    run.verdicts["override_accepted"] += 2
    cells = [c.strip() for c in row("after fake", run.rows, run).split("|")]
    assert cells[-5:-2] == ["1/1", "1", "2"], cells  # answered in time, agreed, override taken
