"""Parent side of the bridge wire format: 4-byte big-endian length, then one UTF-8 JSON object.

The child runner has its own copy of these few lines because it must not import the project.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """The child sent something that is not a well-formed frame; the bridge stops serving it."""


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), allow_nan=False, default=str).encode("utf-8")
    return HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> dict[str, Any] | None:
    """The next frame, or None on a clean end of stream."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError("truncated frame header") from None
        return None
    (size,) = HEADER.unpack(header)
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise ProtocolError("truncated frame body") from None
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message
