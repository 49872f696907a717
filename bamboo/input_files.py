"""Files people hand over (incidents, tasks): which ones the worker opens, and which JSON it accepts.

The worker reads these files with its own privileges (often root) from directories other people fill,
so what it opens is decided before it opens anything: a symbolic link is followed only to a file in
the same directory tree (through one, the worker once read /etc/shadow into a batch), and a FIFO, a
socket, a device or a directory is refused by its type (opening a FIFO blocks until a writer comes,
opening a device may do something). Each refusal is the item's own error, with the reason.

The JSON is strict in the ways later layers would otherwise pay for far from the file: UTF-8 only, a
key once per object, no NaN or Infinity, nesting of at most `MAX_DEPTH` levels, no NUL character or
unpaired surrogate in any string. The checks walk the document without recursion and in time linear
in its size, and callers on an event loop run them in a thread (`bamboo.offload.in_thread`).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

# Real incidents nest a few levels (task_data -> a dict of parameters). A deeper document is a
# mistake or an attack, and every layer after the reader (validation, the store's jsonb, Temporal
# payloads) would otherwise pay for it or fail far from the file that caused it.
MAX_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")
_OPEN_FLAGS = (os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NOCTTY", 0))


class InputRejected(ValueError):
    """The file cannot be used; the message says why, and retrying will not help."""


# ---------------------------------------------------------------- opening
def open_regular(path: str | Path, *, within: str | Path | None = None) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file. A symbolic link is followed only when
    ``within`` is None or its target lies under ``within``; nothing that is not a regular file is ever
    opened. Raises `InputRejected` with the reason, `FileNotFoundError` / `PermissionError` as the OS does."""
    p = Path(path)
    st = os.lstat(p)
    target = p
    if stat.S_ISLNK(st.st_mode):
        real = Path(os.path.realpath(p))
        if within is not None and not real.is_relative_to(Path(os.path.realpath(within))):
            raise InputRejected("is a symbolic link to a file outside its directory, which the worker does not "
                                "follow; copy the file into the directory instead")
        try:
            st = os.stat(real)
        except OSError as exc:
            if exc.errno == 40:  # ELOOP
                raise InputRejected("is a symbolic link that loops back on itself; replace it with the file") from None
            raise
        target = real
    kind = _not_regular(st.st_mode)
    if kind:
        raise InputRejected(f"is {kind}, not a regular file; pass regular JSON files")
    try:
        fd = os.open(target, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: replaced by a link since the check
            raise InputRejected("was replaced by a symbolic link while it was being opened; list it again") from None
        raise
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            raise InputRejected("was replaced by another file or kind of file while it was being opened; list it again")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), which would block the reader"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


# ---------------------------------------------------------------- parsing
class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON allows a key twice and Python keeps the last: the first value would vanish unseen."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (Postgres and strict JSON readers refuse it); use null or a number")


def parse_json(raw: bytes, *, one_line: bool = False) -> Any:
    """The document in ``raw``, checked as the module says; `InputRejected` says what is wrong and where
    (``one_line``: ``raw`` is one line of a JSONL file, labelled by its line number, so placed by its column).

    A UTF-8 byte-order mark is refused, with what to do: JSON does not allow one, and Python's own message
    ("decode using utf-8-sig") told an operator nothing. It is what Windows Notepad and PowerShell 5 write."""
    if raw.startswith(codecs.BOM_UTF8):
        raise InputRejected("starts with a UTF-8 byte-order mark (BOM), which JSON does not allow; save the file as "
                            "UTF-8 without BOM")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputRejected(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); re-encode the file as UTF-8"
        ) from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputRejected(f"invalid JSON {_position(text, exc, one_line)}: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise InputRejected(f"the key {str(exc)!r} appears twice in one JSON object (the second would silently "
                            "replace the first); keep one") from None
    except RecursionError:
        raise InputRejected(f"JSON nested far deeper than {MAX_DEPTH} levels; flatten it") from None
    except ValueError as exc:  # NaN / Infinity
        raise InputRejected(f"invalid JSON: {exc}") from None
    # Strict UTF-8 cannot carry a NUL or a lone surrogate into a string (JSON forbids raw control
    # characters): only a \u escape can. Without one, only the nesting needs walking.
    check_values(data, text="\\u" in text)
    return data


def _position(text: str, exc: json.JSONDecodeError, one_line: bool) -> str:
    """Where the JSON went wrong, in words that agree with the reader's label. A JSONL source is one line
    read with its line break (the last one may have none), labelled `file:N`: JSON's own position there
    ("line 2 column 1" for a line cut short, the break counted as a line; "line 1" for the last) contradicted
    the label, so it is placed by its column alone. Any other text keeps the line and column."""
    body = text.removesuffix("\n").removesuffix("\r")
    if not (one_line or len(body) < len(text)) or "\n" in body or "\r" in body:
        return f"at line {exc.lineno} column {exc.colno}"
    if exc.pos >= len(body):
        return f"at the end of this line (column {len(body) + 1}), which ends too early"
    return f"at column {exc.pos + 1} of this line"


def field_name(path: tuple) -> str:
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
    return out or "document"


def check_values(data: Any, max_depth: int = MAX_DEPTH, *, text: bool = True) -> None:
    """The nesting of the whole document and, with ``text``, every string (keys too), without recursion:
    text the store cannot hold (NUL, unpaired surrogates) and absurd depth fail this document, named by
    field. A path is built per container, not per value: a list of a million strings is one pass."""
    stack: list[tuple[tuple, Any]] = [((), data)]
    if isinstance(data, str):
        _check_text((), data)
        return
    while stack:
        path, value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value)
        if len(path) >= max_depth and value:
            first = next(iter(items))[0]
            raise InputRejected(f"{field_name((path + (first,))[:max_depth])}: nested deeper than {max_depth} "
                                "levels; flatten it")
        for key, item in items:
            if text and isinstance(key, str) and _bad_text(key):
                _check_text(path + (key,), key, what="key")
            if isinstance(item, str):
                if text and _bad_text(item):
                    _check_text(path + (key,), item)
            elif isinstance(item, (dict, list)):
                stack.append((path + (key,), item))


def _bad_text(text: str) -> bool:
    return "\x00" in text or _SURROGATE.search(text) is not None


def _check_text(path: tuple, text: str, what: str = "value") -> None:
    where = field_name(path)
    if "\x00" in text:
        raise InputRejected(f"{where}: the {what} contains a NUL character (\\u0000) at position "
                            f"{text.index(chr(0))}, which the store cannot hold; remove it")
    bad = _SURROGATE.search(text)
    if bad:
        raise InputRejected(f"{where}: the {what} contains an unpaired surrogate (\\u{ord(bad.group()):04x}) at "
                            f"position {bad.start()}, which is not text; fix the encoding")
