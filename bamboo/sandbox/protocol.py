"""Parent side of the bridge wire format: 4-byte big-endian length, then one UTF-8 JSON object.

The child runner has its own copy of these few lines because it must not import the project.
Everything the child sends is hostile input: a frame that does not decode becomes a ``ProtocolError``
carrying a quoted preview of its bytes (so it can be audited), and a decoded value is checked for
what Python's JSON accepts but nothing downstream can carry — lone surrogates (not valid Unicode,
unencodable as UTF-8), NaN and infinities, and nesting deep enough to exhaust the recursion of a serialiser or a scrubber.

A ``done`` frame also carries its own size (`FRAME_SIZE`, put there by ``decode_frame``), because its value is
walked and measured later, away from the bytes: a return value far over its cap is refused by the size of the
frame that brought it, before anything walks it on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass
from typing import Any

from policy.scrub import scrub_text

HEADER = struct.Struct(">I")
MAX_DEPTH = 64
PREVIEW_CHARS = 200


# The key under which ``decode_frame`` puts a done frame's `FrameSize` (replacing anything the child sent by that name).
FRAME_SIZE = "frame_size"


@dataclass(frozen=True)
class FrameSize:
    """How large a frame's body was on the wire: its bytes, and how many ``\\u`` escapes it held."""

    body_bytes: int
    escapes: int

    def least_json_bytes(self) -> int:
        """The fewest bytes the frame's content can take written again as JSON without ASCII escapes
        (``json.dumps(..., ensure_ascii=False)``, how a return value is measured against its cap), when the body
        was written as the child runner writes it (compact separators; every non-ASCII character as a ``\\u``
        escape). Each escape is six bytes on the wire and at least one as UTF-8; nothing else shrinks, and the
        default separators only add. An over-count of escapes makes this smaller, never wrong. A body the script
        wrote itself (padded with blanks, numbers spelled long) can measure more than its content: it is then
        refused for the size it chose to send."""
        return max(0, self.body_bytes - 5 * self.escapes)


class ProtocolError(Exception):
    """The child sent something that is not a well-formed frame; the bridge stops serving it."""

    def __init__(self, message: str, *, preview: str = "") -> None:
        super().__init__(message)
        self.preview = preview


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), allow_nan=False, default=str).encode("utf-8")
    return HEADER.pack(len(body)) + body


async def read_raw_frame(reader: asyncio.StreamReader, max_bytes: int) -> bytes | None:
    """The next frame's body, or None on a clean end of stream."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError("truncated frame header", preview=quote_bytes(exc.partial)) from None
        return None
    (size,) = HEADER.unpack(header)
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit", preview=quote_bytes(header))
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError("truncated frame body", preview=quote_bytes(exc.partial)) from None


def decode_frame(body: bytes) -> dict[str, Any]:
    """One JSON object of valid Unicode, nested at most ``MAX_DEPTH`` deep, or ProtocolError. A ``done`` frame
    gets its `FrameSize` under `FRAME_SIZE` (whatever the child sent under that name is replaced)."""
    try:
        message = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"frame is not UTF-8 (byte {exc.start})", preview=quote_bytes(body)) from None
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"frame is not JSON: {exc.msg} at {exc.pos}", preview=quote_bytes(body)) from None
    except RecursionError:
        raise ProtocolError("frame is nested too deeply to decode", preview=quote_bytes(body)) from None
    except ValueError as exc:  # an integer past the interpreter's digit limit: a plain ValueError, not a JSON one
        raise ProtocolError(f"frame has a value JSON cannot hold here: {str(exc)[:120]}",
                            preview=quote_bytes(body)) from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object", preview=quote_bytes(body))
    if message.get("type") == "done":
        message[FRAME_SIZE] = FrameSize(body_bytes=len(body), escapes=body.count(b"\\u"))
    return message


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> dict[str, Any] | None:
    """The next decoded frame, or None on a clean end of stream."""
    body = await read_raw_frame(reader, max_bytes)
    return None if body is None else decode_frame(body)


def value_problem(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``value`` cannot travel further (a lone surrogate, nesting past ``max_depth``), or None.

    Iterative, so a deep value cannot exhaust the recursion of the check itself.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return "it contains text that is not valid Unicode (a lone surrogate)"
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                return "it contains a number that is not finite (NaN or infinity)"
        elif isinstance(item, (dict, list)):
            if depth > max_depth:
                return f"it is nested more than {max_depth} levels deep"
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str) and not _encodable(key):
                        return "it contains text that is not valid Unicode (a lone surrogate)"
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
    return None


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def safe_text(text: str, limit: int | None = None) -> str:
    """Text any sink can store: lone surrogates and NUL written as escapes, optionally cut to ``limit``."""
    if not _encodable(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = text.replace("\x00", "\\x00")
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"…[{len(text) - limit} more characters]"
    return text


REASON_CHARS = 300


def scrubbed_reason(reason: str, limit: int = REASON_CHARS) -> str:
    """A failure's reason as an audit row or a trace span may keep it: cut, scrubbed of secrets, made storable.

    A reason may quote what a tool raised (``exception: <its message>``, a URL with its password) or what the child
    sent. The audit row always held it scrubbed, while the span took it raw, and spans go to an OTLP collector or a
    console file; so both take it from here. Cut before the scrubber reads it (4x the limit), so a reason of any
    length costs the same."""
    return safe_text(scrub_text(reason[: limit * 4]).text, limit)


def quote_bytes(raw: bytes, limit: int = PREVIEW_CHARS) -> str:
    """A printable quotation of untrusted bytes: valid UTF-8 as text, anything else as \\x escapes."""
    head = raw[: limit * 4].decode("utf-8", "backslashreplace")
    return safe_text(head, limit) + (f"…[{len(raw)} bytes]" if len(raw) > limit else "")
