"""The first-answer benchmark's measurement (bench/diagnosis/first_answer.py): what it reads as the first
answer and when, on a fake workflow handle and a fake clock (no stack, no timing asserted on a real clock);
and its file's place in BENCHMARKS.md."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bamboo.analysis.contract import AnalysisResult
from bench import assemble
from bench.diagnosis.first_answer import Timed, report, timed_answers
from bench.stats import percentile


def answer(cause: str, which: str, status: str = "pending") -> AnalysisResult:
    return AnalysisResult(task_id=1, status="broken", root_cause=cause, is_novel=False, confidence=0.5,
                          resolution="", explanation="", answer=which, model_status=status)


class FakeHandle:
    """Answers None to the first `empty` queries, then the first answer; its result comes when released."""

    def __init__(self, empty: int, first: AnalysisResult | None, final: AnalysisResult, clock: list[float]):
        self.empty, self.first, self.final, self.clock = empty, first, final, clock
        self.queries = 0
        self.release = asyncio.Event()

    async def query(self, query: str, *, result_type: object) -> AnalysisResult | None:
        self.queries += 1
        self.clock[0] += 1.0  # every query costs one tick of the fake clock
        return None if self.queries <= self.empty or self.first is None else self.first

    async def result(self) -> AnalysisResult:
        await self.release.wait()
        return self.final


async def test_the_first_answer_is_timed_when_the_query_first_holds_one_and_the_final_when_the_run_ends() -> None:
    clock = [0.0]
    handle = FakeHandle(2, answer("a", "first"), answer("b", "final", "too_slow"), clock)

    async def start() -> FakeHandle:
        return handle

    async def finish() -> None:
        while handle.queries < 3:
            await asyncio.sleep(0)
        clock[0] = 10.0
        handle.release.set()

    _, timed = await asyncio.gather(finish(), timed_answers(start, 0.001, clock=lambda: clock[0]))
    assert handle.queries == 3 and timed.first_s == 3.0 and timed.final_s == 10.0
    assert timed.first.answer == "first" and timed.skipped and not timed.same_cause


async def test_a_run_that_ends_before_any_answer_is_read_counts_its_final_answer_as_its_first() -> None:
    clock = [0.0]
    handle = FakeHandle(0, None, answer("a", "final", "consulted"), clock)
    handle.release.set()

    async def start() -> FakeHandle:
        return handle

    timed = await timed_answers(start, 0.001, clock=lambda: clock[0])
    assert timed.first is timed.final and timed.first_s == timed.final_s and timed.same_cause and not timed.skipped


def test_percentiles_are_nearest_rank() -> None:
    values = [6.0, 1.0, 5.0, 2.0, 4.0, 3.0]
    assert (percentile(values, 0.50), percentile(values, 0.95), percentile([7.0], 0.95)) == (3.0, 6.0, 7.0)


def test_the_first_answer_file_follows_the_diagnosis_results(tmp_path: Path) -> None:
    (tmp_path / "diagnosis").mkdir()
    (tmp_path / "diagnosis" / "results.md").write_text("# Diagnosis\n\nQUALITY\n")
    (tmp_path / "diagnosis" / "notes.md").write_text("READING\n")
    (tmp_path / "diagnosis" / "first_answer.md").write_text("## Time to the first answer\n\nTIMES\n")
    text = assemble.assemble(tmp_path)
    assert text.index("QUALITY") < text.index("### Time to the first answer") < text.index("TIMES") < text.index("READING")


def test_the_report_puts_the_offline_model_beside_the_scripted_one() -> None:
    def run(first_s: float, final_s: float, status: str) -> list[Timed]:
        return [Timed(first_s, final_s, answer("a", "first"), answer("a", "final", status))] * 2

    runs = {("capable", 120.0): run(0.3, 0.6, "consulted"), ("local", 120.0): run(0.6, 121.0, "too_slow")}
    info = {"train": 140, "stored": 140, "failed": 0, "populate_s": 5.0, "tasks": 2, "load_before": "1.00",
            "load_after": "2.00", "load_during": "1.50 mean, 2.00 max", "wall_s": 300.0}
    text = report(runs, info, command="cmd", seed=6, noise=0.2, threshold=0.5, poll_ms=100, default_deadline=120.0)
    assert "| scripted capable model | 120 s (default) | 2 | 0.30 s | 0.30 s | 0.6 s | 0.6 s | 2 of 2 | 0 | 0 | 2 of 2 |" in text
    assert "| 120 s | 2.00× | 2.00× | 201.67× | 201.67× |" in text
    assert "the model missed its deadline in 2 of 2" in text
