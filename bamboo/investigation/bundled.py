"""Reviewed code procedures shipped as data files (``examples/procedures/*.json``), stored like captures.

A resolved incident's written procedure ("check the scout jobs' maxPSS against ramCount") is knowledge, not
code. The bundled examples carry a few such steps written as code for them, each with its provenance: the
example incidents it answers, who reviewed it, the requests it is for (its triggers) and the causes it was
written for. Storing them gives the offline demo something to reuse without a model writing code.

Each file is checked before anything is stored: its name must be the signature of the tools its code calls
(the name a capture of the same code would get), the scan must read it, and it must call a tool. Storing is a
capture per incident (``ProcedureRepository.capture``), so loading the same files again changes nothing, and
what reuse proposes from them is still reviewed at every turn: nothing here grants anything.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bamboo.investigation.procedures import Captured, ProcedureRepository
from bamboo.investigation.provenance import Capture
from policy.procedures import procedure_name
from policy.signature import scan_code

MAX_FILE_BYTES = 64 * 1024


class BundledProcedureError(ValueError):
    """A bundled procedure file that cannot be used; the message names the file and what is wrong."""


class BundledProcedure(BaseModel):
    """One reviewed code procedure written for the examples, with its provenance."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=60)
    summary: str = Field(min_length=1, max_length=2000)
    code: str = Field(min_length=1, max_length=16 * 1024)
    triggers: tuple[str, ...] = Field(min_length=1, max_length=50)
    causes: tuple[str, ...] = ()
    clues: tuple[str, ...] = ()
    incidents: tuple[str, ...] = Field(min_length=1, max_length=200)
    reviewed_by: str = Field(min_length=1, max_length=200, description="who reviewed it (a role, not a name)")
    note: str = Field(default="", max_length=2000)

    @model_validator(mode="after")
    def _named_by_its_signature(self) -> BundledProcedure:
        signature = scan_code(self.code)
        if signature.opaque:
            raise ValueError(f"the scan cannot read its code: {'; '.join(signature.opaque_reasons)}")
        if not signature.tools:
            raise ValueError("its code calls no tool")
        expected = procedure_name(signature.tools)
        if self.name != expected:
            raise ValueError(f"it is named {self.name!r}, but the tools its code calls name it {expected!r}")
        return self


def load_bundled(directory: Path, incidents: Path | None = None) -> list[BundledProcedure]:
    """Every ``*.json`` in ``directory``, checked; with ``incidents``, each named incident must be one of the
    incident files there (by ``incident_id``). Raises BundledProcedureError naming the first bad file."""
    known = _incident_ids(incidents) if incidents is not None else None
    found = []
    for path in sorted(directory.glob("*.json")):
        if path.stat().st_size > MAX_FILE_BYTES:
            raise BundledProcedureError(f"{path.name}: over {MAX_FILE_BYTES} bytes")
        try:
            procedure = BundledProcedure.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, ValidationError) as exc:
            first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise BundledProcedureError(f"{path.name}: {first}") from None
        unknown = sorted(set(procedure.incidents) - known) if known is not None else []
        if unknown:
            raise BundledProcedureError(f"{path.name}: names incidents that are not examples: {', '.join(unknown)}")
        found.append(procedure)
    return found


async def store_bundled(repository: ProcedureRepository, procedures: list[BundledProcedure]) -> dict[str, Captured]:
    """Store each procedure as approved, one capture per incident it names; returns the last capture of each."""
    stored: dict[str, Captured] = {}
    for procedure in procedures:
        for incident in procedure.incidents:
            stored[procedure.name] = await repository.capture(procedure.name, procedure.code, "approved", Capture(
                incident=incident, source="example", summary=procedure.summary, triggers=procedure.triggers,
                causes=procedure.causes, clues=procedure.clues, reviewed_by=(procedure.reviewed_by,)))
    return stored


def _incident_ids(directory: Path) -> set[str]:
    ids = set()
    for path in directory.glob("*.json"):
        try:
            ids.add(str(json.loads(path.read_text(encoding="utf-8"))["incident_id"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return ids
