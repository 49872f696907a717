"""Reading incident files for populate: every way a file can be wrong becomes one clear reason.

A bad file fails its own item and never the batch, so the reasons must be good enough for an
operator to fix the file without opening a debugger. What is opened and which JSON is accepted is
`bamboo.input_files`; the incident's own fields are bounded by its model (`bamboo.models.incident`).
Reading and checking is sized by the file, so code on an event loop calls the `*_off_loop` forms.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from bamboo import input_files
from bamboo.input_files import InputRejected
from bamboo.models.incident import Incident, IncidentSource
from bamboo.offload import BudgetExceeded, in_thread

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_EMAIL_BYTES = 1024 * 1024
MAX_LOG_BYTES = 2 * 1024 * 1024
MAX_DEPTH = input_files.MAX_DEPTH
# Reading, checking and validating one incident of at most MAX_FILE_BYTES takes about a second on a
# busy core; this bound is for a reader that hangs (a slow network filesystem), not for a big file.
READ_BUDGET_S = 120.0


class IncidentRejected(InputRejected):
    """The file cannot become an incident; retrying will not help."""


class SourceListingError(ValueError):
    pass


def list_sources(path: str | Path) -> list[IncidentSource]:
    p = Path(path)
    if not p.exists():
        raise SourceListingError(f"{p} does not exist: pass a directory of incident .json files or a .jsonl file")
    if not p.is_dir() and not p.is_file():
        raise SourceListingError(f"{p} is not a regular file (a FIFO, socket or device would block or never end): "
                                 "pass a directory of incident .json files or a .jsonl file")
    if p.is_dir():
        # One resolve for the directory, no stat per file: a resolve and a stat per file made listing
        # 100k files a noticeable pause before the first incident started. Every *.json entry is an item,
        # whatever it is: a directory, a FIFO or a link leaving the directory fails its own item with the
        # reason when it is read, instead of vanishing from the batch unnoticed.
        base = p.resolve()
        with os.scandir(base) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".json"))
        if not names:
            raise SourceListingError(f"{p} holds no .json files")
        return [IncidentSource(path=str(base / name)) for name in names]
    if p.suffix == ".jsonl":
        sources = []
        resolved = str(p.resolve())
        offset = 0
        with open(p, "rb") as fh:
            for n, raw in enumerate(fh, start=1):
                if raw.strip():
                    sources.append(IncidentSource(path=resolved, line=n, offset=offset))
                offset += len(raw)
        if not sources:
            raise SourceListingError(f"{p} is empty")
        return sources
    if p.suffix == ".json":
        return [IncidentSource(path=str(p.resolve()))]
    raise SourceListingError(f"{p} is neither a directory, a .json nor a .jsonl file")


def _open_source(p: Path):
    """The file, opened only if it is a regular file in its batch's directory (a link is followed
    within it, never out of it); see `bamboo.input_files.open_regular`."""
    try:
        return input_files.open_regular(p, within=p.parent)
    except InputRejected as exc:
        raise IncidentRejected(str(exc)) from None


def _read_bytes(source: IncidentSource) -> bytes:
    p = Path(source.path)
    try:
        if source.line is None:
            with _open_source(p) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_FILE_BYTES:
                    raise IncidentRejected(f"file is {size / 1e6:.1f} MB, over the {MAX_FILE_BYTES // 2**20} MiB limit for one incident")
                return fh.read(MAX_FILE_BYTES + 1)
        with _open_source(p) as fh:
            if source.offset is not None:  # listed with its offset: seek, do not scan
                fh.seek(source.offset)
                raw = fh.readline(MAX_FILE_BYTES + 1)
                if raw:
                    return _within_limit(raw)
            else:
                for n, raw in enumerate(fh, start=1):
                    if n == source.line:
                        return _within_limit(raw)
        raise IncidentRejected(f"line {source.line} no longer exists (the file shrank after listing)")
    except FileNotFoundError:
        raise IncidentRejected("file not found (moved or deleted after the batch was listed)") from None
    except IsADirectoryError:
        raise IncidentRejected("is a directory, not an incident file") from None
    except PermissionError:
        raise IncidentRejected("file is not readable by the worker (permission denied)") from None


def _within_limit(line: bytes) -> bytes:
    if len(line) > MAX_FILE_BYTES:
        raise IncidentRejected(f"line is over the {MAX_FILE_BYTES // 2**20} MiB limit for one incident")
    return line


def check_values(data, max_depth: int = MAX_DEPTH) -> None:
    """Every string and the nesting of ``data`` (`bamboo.input_files.check_values`), as an incident's error."""
    try:
        input_files.check_values(data, max_depth)
    except InputRejected as exc:
        raise IncidentRejected(str(exc)) from None


def parse_incident(raw: bytes, fallback_id: str, *, one_line: bool = False) -> Incident:
    try:
        data = input_files.parse_json(raw, one_line=one_line)
    except InputRejected as exc:
        raise IncidentRejected(str(exc)) from None
    if not isinstance(data, dict):
        raise IncidentRejected(f"top level must be a JSON object, found {type(data).__name__}")
    data.setdefault("incident_id", fallback_id)
    email = data.get("email_text")
    if isinstance(email, str) and len(email.encode("utf-8")) > MAX_EMAIL_BYTES:
        raise IncidentRejected(
            f"email_text is {len(email.encode('utf-8')) / 1e6:.1f} MB, over the {MAX_EMAIL_BYTES // 2**20} MiB limit; "
            "trim quoted history and attachments"
        )
    logs = data.get("task_logs")
    if isinstance(logs, dict):
        total = sum(len(v.encode("utf-8")) for v in logs.values() if isinstance(v, str))
        if total > MAX_LOG_BYTES:
            raise IncidentRejected(f"task_logs total {total / 1e6:.1f} MB, over the {MAX_LOG_BYTES // 2**20} MiB limit; keep excerpts")
    try:
        return Incident.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(err) for err in exc.errors()[:5])
        raise IncidentRejected(f"does not match the incident format: {problems}") from None


def _problem(err: ErrorDetails) -> str:
    """`field: message`, without pydantic's "Value error, " prefix or the field named twice."""
    field = ".".join(str(p) for p in err["loc"]) or "incident"
    msg = err["msg"].removeprefix("Value error, ")
    return msg if msg.startswith(field) else f"{field}: {msg}"


@dataclass(frozen=True)
class ReadIncident:
    """An incident and the fingerprint of what it was read from (stored with its graph)."""

    incident: Incident
    content_hash: str


def _fallback_id(source: IncidentSource) -> str:
    return Path(source.path).stem + (f"-{source.line}" if source.line else "")


def _fingerprint(source: IncidentSource, raw: bytes) -> str:
    """The incident's bytes and the id it gets when it names none (the file's stem, the line): two
    inputs with the same fingerprint become the same incident. Trailing line ends are not content,
    so a JSONL line keeps its fingerprint when lines are appended after it. The routing's version is in
    it too: what was learned under other clue names is not "already learned"."""
    from bamboo.extraction.panda import routing

    digest = hashlib.sha256(b"bamboo-incident-v1\0" + f"routing-{routing.ROUTING_VERSION}".encode() + b"\0"
                            + _fallback_id(source).encode() + b"\0")
    digest.update(raw.rstrip(b"\r\n"))
    return digest.hexdigest()


def content_hash(source: IncidentSource) -> str:
    """The fingerprint alone, without parsing: what a batch compares with the stored graphs to skip
    incidents it learned before. Raises `IncidentRejected` when the file cannot be read."""
    return _fingerprint(source, _read_bytes(source))


def read_incident(source: IncidentSource) -> ReadIncident:
    raw = _read_bytes(source)
    return ReadIncident(parse_incident(raw, _fallback_id(source), one_line=source.line is not None),
                        _fingerprint(source, raw))


def load_incident(source: IncidentSource) -> Incident:
    return read_incident(source).incident


async def read_incident_off_loop(source: IncidentSource) -> ReadIncident:
    """`read_incident` in the offload thread pool: an 8 MiB incident is about a second of parsing and
    checking, which on the event loop stopped every heartbeat and model call of the worker."""
    try:
        return await in_thread(read_incident, source, budget_s=READ_BUDGET_S, what="reading and checking the file")
    except BudgetExceeded as exc:
        raise IncidentRejected(f"{exc}; is it on a filesystem that stopped answering?") from None


async def content_hash_off_loop(source: IncidentSource) -> str:
    """`content_hash` in the offload thread pool (reading and hashing up to 8 MiB)."""
    try:
        return await in_thread(content_hash, source, budget_s=READ_BUDGET_S, what="reading the file")
    except BudgetExceeded as exc:
        raise IncidentRejected(f"{exc}; is it on a filesystem that stopped answering?") from None
