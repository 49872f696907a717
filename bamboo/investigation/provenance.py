"""Where a stored procedure came from and how often it was used: the record reuse shows and matches against.

A procedure is one row per signature (``proc__<tools>``). Each capture of it (a resolved or abandoned session
that approved and ran it, or a bundled example) adds to its provenance: the incident it came from counts once,
so its frequency is the number of distinct incidents; the requests and signals that led to it become triggers
the reuse step matches an operator's request against; the causes and the task's clues it was captured on, who
reviewed it, and its last run are kept beside them. Code written from a resolved incident's written procedure
(``/codify``) also brings the incidents that recorded that procedure, and names it in ``codified_from``, so the
written procedure is shown as turned into code and is not written again. Lists are bounded, oldest entries first
out.

Pure: the repository reads and writes it as the row's ``meta``; nothing here talks to the database.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_INCIDENTS = 200
MAX_TRIGGERS = 50
MAX_CLUES = 100
MAX_SMALL = 20
MAX_TEXT = 500
CaptureSource = Literal["session", "example"]
# Who approved a run, when no person did this time (a standing permission or the automatic phase): not a reviewer.
_NOT_A_PERSON = ("policy:", "automatic", "procedure:")


class Capture(BaseModel):
    """One capture of a procedure's code, with what it was for."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    incident: str | None = Field(default=None, description="the incident or session it came from; counted once")
    source: CaptureSource = "session"
    summary: str = ""
    triggers: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    clues: tuple[str, ...] = ()
    reviewed_by: tuple[str, ...] = ()
    ran_at: datetime | None = None
    run_status: str = ""
    codified_from: tuple[str, ...] = Field(
        default=(), description="the written procedures this code implements (``/codify``)")
    written_incidents: tuple[str, ...] = Field(
        default=(), description="the resolved incidents that recorded those written procedures; each counted once")


class ProcedureProvenance(BaseModel):
    """The merged record of every capture of one procedure (one signature)."""

    model_config = ConfigDict(frozen=True)

    frequency: int = 0
    incidents: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    summary: str = ""
    triggers: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    clues: tuple[str, ...] = ()
    reviewed_by: tuple[str, ...] = ()
    last_run_at: datetime | None = None
    last_run_status: str = ""
    codified_from: tuple[str, ...] = ()
    versions: int = 1
    previous_code_hash: str | None = None

    @classmethod
    def of(cls, meta: dict[str, Any] | None) -> ProcedureProvenance:
        """Read a row's ``meta``, including the keys rows written before provenance existed used."""
        meta = dict(meta or {})
        legacy_session = meta.get("session")
        if "frequency" not in meta:
            meta["incidents"] = [f"investigate:{legacy_session}"] if legacy_session else []
            meta["frequency"] = len(meta["incidents"])
            meta["triggers"] = meta.get("trigger_signals") or []
            meta["reviewed_by"] = [meta["approved_by"]] if meta.get("approved_by") else []
        known = {k: v for k, v in meta.items() if k in cls.model_fields}
        try:
            return cls.model_validate(known)
        except ValueError:
            return cls()

    def merged(self, capture: Capture) -> ProcedureProvenance:
        """This record with ``capture`` added: a new incident counts once, lists grow without repeats."""
        came_from = [i for i in (capture.incident, *capture.written_incidents) if i]
        counted = len({i for i in came_from if i not in self.incidents})
        people = [p for p in capture.reviewed_by if p and not p.startswith(_NOT_A_PERSON)]
        later = capture.ran_at is not None and (self.last_run_at is None or capture.ran_at >= self.last_run_at)
        return self.model_copy(update={
            "frequency": self.frequency + counted,
            "incidents": _union(self.incidents, came_from, MAX_INCIDENTS),
            "sources": _union(self.sources, [capture.source], MAX_SMALL),
            "summary": self.summary or capture.summary[:MAX_TEXT * 4],
            "triggers": _union(self.triggers, capture.triggers, MAX_TRIGGERS),
            "causes": _union(self.causes, capture.causes, MAX_SMALL),
            "clues": _union(self.clues, capture.clues, MAX_CLUES),
            "reviewed_by": _union(self.reviewed_by, people, MAX_SMALL),
            "last_run_at": capture.ran_at if later else self.last_run_at,
            "last_run_status": capture.run_status if later else self.last_run_status,
            "codified_from": _union(self.codified_from, capture.codified_from, MAX_SMALL),
        })

    def replaced(self, previous_code_hash: str) -> ProcedureProvenance:
        """This record after the procedure's body changed to a new version."""
        return self.model_copy(update={"versions": self.versions + 1, "previous_code_hash": previous_code_hash})

    def meta(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _union(kept: Iterable[str], new: Iterable[str], limit: int) -> tuple[str, ...]:
    """``kept`` then the new entries not yet in it (each cut to MAX_TEXT), the newest ``limit`` of them."""
    out = list(kept)
    seen = set(out)
    for item in new:
        item = str(item).strip()[:MAX_TEXT]
        if item and item not in seen:
            out.append(item)
            seen.add(item)
    return tuple(out[-limit:])
