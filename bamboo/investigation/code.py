"""How reviewed code is turned into the script the sandbox runs.

The reviewed text is what is hashed and approved; the task under investigation reaches it as a plain
variable set by one line in front of it. Keeping that line outside the reviewed text means the same
procedure keeps its identity (and its grant) across tasks, while the value it works on is visible in the
transcript of the run. Pure and deterministic: the workflow calls it too.
"""

from __future__ import annotations

TASK_VARIABLE = "task_id"


def with_task_preamble(code: str, task_id: int | None) -> str:
    """``code`` preceded by ``task_id = <value>`` (an int or None, never any other text)."""
    value = int(task_id) if task_id is not None else None
    return f"{TASK_VARIABLE} = {value!r}\n{code}"
