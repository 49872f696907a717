"""JEDI's side of a task command: the server only registers it, JEDI carries it out minutes later.

On the real server ``task/kill`` (and retry, finish, pause, resume, reload_input) check the task's status
and the caller's rights, then write one row into DEFT's command table (replacing any earlier command for
the task) and answer "registered"; the task's status changes only when JEDI picks the command up. The
simulator keeps the same table and applies a command once ``delay_s`` has passed, when the world is next
looked at, so a client that reports the status straight after a kill sees the old one, as in production.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from bamboo.panda.simulator.world import World

# Status rules of the server's command check (the task's status when the command arrives).
KILL_REFUSED = frozenset({"finished", "done", "prepared", "broken", "aborted", "toabort", "aborting", "failed"})
RETRY_ALLOWED = frozenset({"finished", "failed", "exhausted"})
PAUSE_REFUSED = frozenset({"finished", "failed", "done", "aborted", "broken", "paused"})
RESUME_ALLOWED = frozenset({"paused", "throttled", "staging"})
INCEXEC_ALLOWED = frozenset({"finished", "failed", "aborted", "done", "exhausted"})
# A retry of a running user task re-runs its failed jobs at once instead of registering a command.
RETRY_IN_PLACE = frozenset({"running", "scouting", "pending"})

# What the task becomes once JEDI has acted.
OUTCOME = {"kill": "aborted", "finish": "finished", "retry": "ready", "incexec": "ready", "pause": "paused"}


class RegisteredCommand(BaseModel):
    """One row of the command table, as DEFT's PRODSYS_COMM holds it, plus when JEDI will act."""

    task_id: int
    command: str
    comment: str
    registered_at: float
    due_at: float
    applied: bool = False


@dataclass
class Outcome:
    code: int
    message: str


class Jedi:
    """The command table and the delayed application of its commands; thread-safe."""

    def __init__(self, world: World, delay_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.world = world
        self.delay_s = delay_s
        self.clock = clock
        self.lock = threading.RLock()
        self.pending: dict[int, RegisteredCommand] = {}
        self.registered: list[RegisteredCommand] = []

    def send(self, task_id: int, command: str, user: str, production: bool, qualifier: str | None = None) -> Outcome:
        """The server's command check and registration; codes as the API returns them (0 registered,
        2 no such task, 4 refused in this status, 5 a running user task whose failed jobs are retried)."""
        with self.lock:
            self.tick()
            task = self.world.tasks.get(task_id)
            if task is None:
                return Outcome(2, f"jediTaskID={task_id} not found")
            status = str(task.get("status"))
            allowed, extra = _allowed(command, status, production)
            if not allowed:
                if command == "retry" and status in RETRY_IN_PLACE and task.get("prodSourceLabel") == "user":
                    return Outcome(5, status)
                return Outcome(4, f"Command rejected: the {command} command is not accepted if the task is in "
                                  f"{status} status {extra}")
            now = self.clock()
            comment = f"{qualifier + ' ' if qualifier else ''}{command} by {user}"
            row = RegisteredCommand(task_id=task_id, command=command, comment=comment, registered_at=now,
                                    due_at=now + self.delay_s)
            self.pending[task_id] = row  # the server deletes the task's earlier command first
            self.registered.append(row)
            return Outcome(0, f"command={command} is registered for task ID {task_id}. will be executed in a few minutes")

    def tick(self) -> None:
        """Apply every command whose time has come (called whenever the world is read)."""
        with self.lock:
            now = self.clock()
            for task_id, row in list(self.pending.items()):
                if row.due_at <= now:
                    self._apply(row)
                    row.applied = True
                    del self.pending[task_id]

    def table(self) -> list[dict[str, Any]]:
        with self.lock:
            return [{"comm_task": r.task_id, "comm_cmd": r.command, "comm_comment": r.comment}
                    for r in self.pending.values()]

    def _apply(self, row: RegisteredCommand) -> None:
        task = self.world.tasks.get(row.task_id)
        if task is None:
            return
        before = task.get("status")
        if row.command == "resume":
            task["status"] = task.get("oldStatus") or "running"
        else:
            task["status"] = OUTCOME.get(row.command, before)
        task["oldStatus"] = before
        task["modificationTime"] = task["stateChangeTime"] = datetime.now().replace(microsecond=0)


def _allowed(command: str, status: str, production: bool) -> tuple[bool, str]:
    if command in ("kill", "finish"):
        return status not in KILL_REFUSED, ""
    if command == "retry":
        if status not in RETRY_ALLOWED:
            return False, ""
        if status == "exhausted" and not production:
            return False, "and production role is missing"
        return True, ""
    if command == "incexec":
        return status in INCEXEC_ALLOWED, ""
    if command == "pause":
        return status not in PAUSE_REFUSED, ""
    if command == "resume":
        return status in RESUME_ALLOWED, ""
    return True, ""
