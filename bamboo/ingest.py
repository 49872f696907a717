"""Reading incident files for populate: every way a file can be wrong becomes one clear reason.

A bad file fails its own item and never the batch, so the reasons must be good enough for an
operator to fix the file without opening a debugger.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bamboo.accumulation.contract import IncidentSource
from bamboo.models.incident import Incident

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_EMAIL_BYTES = 1024 * 1024
MAX_LOG_BYTES = 2 * 1024 * 1024
# Real incidents nest a few levels (task_data -> a dict of parameters). A deeper document is a
# mistake or an attack, and every layer after the reader (validation, the store's jsonb, Temporal
# payloads) would otherwise pay for it or fail far from the file that caused it.
MAX_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


class IncidentRejected(ValueError):
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


def _open_regular(p: Path):
    """Open without blocking, then insist on a regular file: a FIFO put in the file's place (or listed
    by name) would otherwise block the reader until something writes to it, which may be never."""
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise IncidentRejected(f"is {kind}, not an incident file; pass regular .json/.jsonl files")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_bytes(source: IncidentSource) -> bytes:
    p = Path(source.path)
    try:
        if source.line is None:
            with _open_regular(p) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > MAX_FILE_BYTES:
                    raise IncidentRejected(f"file is {size / 1e6:.1f} MB, over the {MAX_FILE_BYTES // 2**20} MiB limit for one incident")
                return fh.read(MAX_FILE_BYTES + 1)
        with _open_regular(p) as fh:
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


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON allows a key twice and Python keeps the last: the first value would vanish unseen."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (Postgres and strict JSON readers refuse it); use null or a number")


def _field(path: tuple) -> str:
    """`task_data.errorDialog`, `resolution_record.procedure[2]`: the field as an operator would name
    it, with unprintable key characters escaped and a very deep path shortened in the middle."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        if not part.isprintable() or _SURROGATE.search(part):
            part = part.encode("unicode_escape").decode("ascii")
        out += f".{part}" if out else part
    if len(out) > 120:
        out = out[:60] + "…" + out[-40:]
    return out or "incident"


def check_values(data: Any, max_depth: int = MAX_DEPTH) -> None:
    """Every string (keys too) and the nesting of the whole document, without recursion: text the
    store cannot hold (NUL, unpaired surrogates) and absurd depth fail this incident, named by field,
    instead of a whole group write far away with a raw database message."""
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if len(path) > max_depth:
            raise IncidentRejected(f"{_field(path[:max_depth])}: nested deeper than {max_depth} levels; flatten it")
        if isinstance(value, str):
            _check_text(path, value)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(path + (key,), key, what="key")
                stack.append((path + (key,), item))
        elif isinstance(value, list):
            stack.extend((path + (i,), item) for i, item in enumerate(value))


def _check_text(path: tuple, text: str, what: str = "value") -> None:
    where = _field(path)
    if "\x00" in text:
        raise IncidentRejected(f"{where}: the {what} contains a NUL character (\\u0000) at position "
                               f"{text.index(chr(0))}, which the store cannot hold; remove it")
    bad = _SURROGATE.search(text)
    if bad:
        raise IncidentRejected(f"{where}: the {what} contains an unpaired surrogate (\\u{ord(bad.group()):04x}) at "
                               f"position {bad.start()}, which is not text; fix the encoding")


def parse_incident(raw: bytes, fallback_id: str) -> Incident:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IncidentRejected(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); re-encode the file as UTF-8"
        ) from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise IncidentRejected(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise IncidentRejected(f"the key {str(exc)!r} appears twice in one JSON object (the second would silently "
                               "replace the first); keep one") from None
    except RecursionError:
        raise IncidentRejected(f"JSON nested far deeper than {MAX_DEPTH} levels; flatten it") from None
    except ValueError as exc:  # NaN / Infinity
        raise IncidentRejected(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise IncidentRejected(f"top level must be a JSON object, found {type(data).__name__}")
    check_values(data)
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


def _problem(err: dict) -> str:
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
    return ReadIncident(parse_incident(raw, _fallback_id(source)), _fingerprint(source, raw))


def load_incident(source: IncidentSource) -> Incident:
    return read_incident(source).incident
