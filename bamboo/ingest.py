"""Reading incident files for populate: every way a file can be wrong becomes one clear reason.

A bad file fails its own item and never the batch, so the reasons must be good enough for an
operator to fix the file without opening a debugger.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from bamboo.models.accumulate import IncidentSource
from bamboo.models.incident import Incident

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_EMAIL_BYTES = 1024 * 1024
MAX_LOG_BYTES = 2 * 1024 * 1024


class IncidentRejected(ValueError):
    """The file cannot become an incident; retrying will not help."""


class SourceListingError(ValueError):
    pass


def list_sources(path: str | Path) -> list[IncidentSource]:
    p = Path(path)
    if not p.exists():
        raise SourceListingError(f"{p} does not exist: pass a directory of incident .json files or a .jsonl file")
    if p.is_dir():
        # One resolve for the directory and the types scandir already read: a resolve and a stat per
        # file made listing 100k files a noticeable pause before the first incident started.
        base = p.resolve()
        with os.scandir(base) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".json") and e.is_file())
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


def _read_bytes(source: IncidentSource) -> bytes:
    p = Path(source.path)
    try:
        if source.line is None:
            size = p.stat().st_size
            if size > MAX_FILE_BYTES:
                raise IncidentRejected(f"file is {size / 1e6:.1f} MB, over the {MAX_FILE_BYTES // 2**20} MiB limit for one incident")
            return p.read_bytes()
        with open(p, "rb") as fh:
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


def parse_incident(raw: bytes, fallback_id: str) -> Incident:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IncidentRejected(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); re-encode the file as UTF-8"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IncidentRejected(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
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
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'incident'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise IncidentRejected(f"does not match the incident format: {problems}") from None


def load_incident(source: IncidentSource) -> Incident:
    raw = _read_bytes(source)
    fallback = Path(source.path).stem + (f"-{source.line}" if source.line else "")
    return parse_incident(raw, fallback)
