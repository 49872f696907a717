from __future__ import annotations

from bamboo.panda.errors import PandaUnavailable
from bamboo.panda.task_records import task_for_analysis


class _JobsDown:
    """A PanDA client whose task call answers and whose jobs call cannot be reached."""

    async def get_task(self, task_id: int) -> dict:
        return {"jediTaskID": task_id, "status": "failed"}

    async def get_job_descriptions(self, task_id: int, *, unsuccessful_only: bool = False) -> list:
        raise PandaUnavailable("connection refused")


async def test_jobs_that_cannot_be_read_leave_the_task_analysable_and_say_so() -> None:
    task, note = await task_for_analysis(_JobsDown(), 7)  # type: ignore[arg-type]
    assert task == {"jediTaskID": 7, "status": "failed"}
    assert "failed jobs could not be read" in note and "connection refused" in note
