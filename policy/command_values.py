"""Checking and canonicalising one argument value by its declared kind (URL, path, integer, enum, text, form).

Every check returns the canonical spelling that will be executed, or raises ``CommandDenied`` with one line
saying which value was refused and why. Paths are resolved lexically here (``..`` collapsed against the
tool's root); symlinks need the file system, so the caller passes a resolver and the runner checks again right
before it executes.

Pure: stdlib only, no I/O of its own.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable
from urllib.parse import unquote

from policy.command_dialects import PANDA_LEGACY_SEGMENTS
from policy.command_models import CommandDenied, ValueKind

_INTEGER = re.compile(r"[0-9]{1,18}")
# A URL the policy can read the same way curl does: scheme, a plain host or bracketed IPv6, optional port, and
# a path/query of unreserved and percent-encoded characters only. No userinfo, no fragment, no backslash:
# those are where URL parsers disagree about which host is meant.
_URL = re.compile(
    r"(?P<scheme>https?)://(?P<host>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<path>/[A-Za-z0-9._~!$'()*+,;=:%/-]*)?(?:\?(?P<query>[A-Za-z0-9._~!$'()*+,;=:%/?&-]*))?",
    re.IGNORECASE,
)
_FORM_NAME = re.compile(r"[A-Za-z0-9_.\-\[\]]+")
_SUBSTITUTION = ("`", "$(", "${")
_DEFAULT_PORTS = {"http": 80, "https": 443}

Resolver = Callable[[str], str]


def has_control(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def check_text(what: str, value: str, pattern: str | None) -> str:
    """Free text: not a response file, no control or command-substitution characters, no bare path."""
    if value.startswith("@"):
        raise CommandDenied(f"{what} {value!r} starts with '@', which reads a file; pass the content itself")
    if has_control(value):
        raise CommandDenied(f"{what} contains a control character (newline, tab or NUL); remove it")
    for marker in _SUBSTITUTION:
        if marker in value:
            raise CommandDenied(f"{what} {value!r} contains command substitution {marker!r}; remove it")
    if value.startswith(("/", "~")) or ".." in value.split("/"):  # a '..' segment anywhere: 'x/..', './/..'
        raise CommandDenied(f"{what} {value!r} looks like a path; declare it as a root-bounded path")
    if pattern is not None and not re.fullmatch(pattern, value):
        raise CommandDenied(f"{what} {value!r} does not match the allowed pattern {pattern!r}")
    return value


def check_integer(what: str, value: str) -> str:
    if not _INTEGER.fullmatch(value):
        raise CommandDenied(f"{what} {value!r} must be a non-negative decimal integer")
    return str(int(value))


def check_enum(what: str, value: str, choices: list[str]) -> str:
    if value not in choices:
        raise CommandDenied(f"{what} {value!r} is not one of {', '.join(choices)}")
    return value


def check_form(what: str, value: str) -> str:
    """``name=value`` pairs joined by ``&``: curl would read ``@file`` or ``<file`` bodies from disk."""
    if has_control(value):
        raise CommandDenied(f"{what} contains a control character; remove it")
    for part in value.split("&"):
        name, eq, content = part.partition("=")
        if "@" in name or "<" in name:
            raise CommandDenied(f"{what} part {part!r} reads a file (name@file); pass name=value pairs")
        if not eq or not _FORM_NAME.fullmatch(name):
            raise CommandDenied(f"{what} part {part!r} must be name=value with a plain field name")
        if content.startswith(("@", "<")):
            raise CommandDenied(f"{what} field {name} {content!r} reads a file; pass the value itself")
        for marker in _SUBSTITUTION:
            if marker in content:
                raise CommandDenied(f"{what} field {name} contains command substitution {marker!r}; remove it")
    return value


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def check_json(what: str, value: str) -> str:
    """A JSON object of scalars (or lists of scalars), returned re-encoded: sorted keys, no duplicates, compact.

    Re-encoding means a duplicate key the policy read one way cannot reach a server that reads it the other.
    """
    if value.lstrip().startswith("@"):
        raise CommandDenied(f"{what} starts with '@', which reads a file; pass the JSON itself")
    pairs_seen: list[str] = []

    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            pairs_seen.append(next(k for k in keys if keys.count(k) > 1))
        return dict(pairs)

    try:
        body = json.loads(value, object_pairs_hook=no_duplicates)
    except ValueError:
        raise CommandDenied(f"{what} is not valid JSON; pass one JSON object") from None
    if pairs_seen:
        raise CommandDenied(f"{what} repeats the key {pairs_seen[0]!r}; give each field once")
    if not isinstance(body, dict):
        raise CommandDenied(f"{what} must be a JSON object")
    for key, item in body.items():
        if not _FORM_NAME.fullmatch(key):
            raise CommandDenied(f"{what} field {key!r} is not a plain field name")
        if not (_scalar(item) or isinstance(item, list) and all(_scalar(i) for i in item)):
            raise CommandDenied(f"{what} field {key} must be a scalar or a list of scalars")
        for text in [item] if isinstance(item, str) else [i for i in item if isinstance(i, str)] if isinstance(
                item, list) else []:
            if has_control(text) or any(m in text for m in _SUBSTITUTION):
                raise CommandDenied(f"{what} field {key} contains control or command-substitution characters")
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def parse_url(value: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, path, query) of a URL the strict grammar accepts."""
    m = _URL.fullmatch(value)
    if m is None:
        raise ValueError(value)
    scheme = m["scheme"].lower()
    port = int(m["port"]) if m["port"] else _DEFAULT_PORTS[scheme]
    return scheme, m["host"].lower(), port, m["path"] or "/", m["query"] or ""


def check_url(what: str, value: str, allowed_hosts: list[str], url_paths: list[str]) -> str:
    """An http(s) URL whose host (and port, when the entry names one) is allow-listed."""
    if not value.isascii():
        raise CommandDenied(f"{what} {value!r} is not ASCII; write the host in punycode")
    lowered = value.lower()
    if not lowered.startswith(("http://", "https://")):
        scheme = lowered.split(":", 1)[0] if ":" in lowered else "none"
        hint = "file:// reads local files" if scheme == "file" else f"scheme {scheme!r} is not http or https"
        raise CommandDenied(f"{what} {value!r} is refused: {hint}")
    try:
        scheme, host, port, path, query = parse_url(value)
    except ValueError:
        raise CommandDenied(
            f"{what} {value!r} is not a plain http(s) URL (no user@, fragment, backslash or spaces)") from None
    if host not in allowed_hosts and f"{host}:{port}" not in allowed_hosts:
        raise CommandDenied(f"{what} host {host}:{port} is not allow-listed by the rule")
    moved = _moved_path(path)
    if moved:
        raise CommandDenied(f"{what} path {path!r} is refused: {moved}, so the request would go to another path "
                            "than the one checked; write the path as it is meant")
    if url_paths and not any(re.fullmatch(p, path) for p in url_paths):
        raise CommandDenied(f"{what} path {path!r} is not one this rule allows")
    return value


def _moved_path(path: str) -> str:
    """Why a path would reach another endpoint than its text says, or "". curl removes ``.`` and ``..`` segments
    before it sends, and a server may decode ``%2e`` or ``%2f`` before it routes: a rule's ``url_paths`` matched
    ``/api/v1/task/get_x/../../../../server/panda/put_file_recovery_request``, which PanDA's legacy API runs on a
    GET. Each level of percent-encoding is decoded in turn, as a chain of servers could."""
    seen = path
    for _ in range(8):
        if any(segment in (".", "..") for segment in seen.split("/")):
            return "it has a '.' or '..' segment"
        if "\\" in seen:
            return "it has a backslash"
        decoded = unquote(seen)
        if decoded.count("/") != seen.count("/"):
            return "it has an encoded '/'"
        if decoded == seen:
            return ""
        seen = decoded
    return "it is percent-encoded too many times over"


def is_panda_legacy_path(path: str) -> bool:
    """Whether a URL path reaches PanDA's legacy API (``/server/panda/<method>``), whose methods write on a GET.

    Read the way a server could route it: percent-encoding decoded level by level, backslashes as slashes, dot
    segments resolved, repeated slashes merged (Apache merges them), ``;parameters`` dropped, any letter case."""
    seen = path
    for _ in range(8):
        decoded = unquote(seen)
        if decoded == seen:
            break
        seen = decoded
    normal = posixpath.normpath("/" + seen.replace("\\", "/").lower())
    segments = [s.split(";", 1)[0] for s in normal.split("/") if s]
    return tuple(segments[: len(PANDA_LEGACY_SEGMENTS)]) == PANDA_LEGACY_SEGMENTS


def check_path(what: str, value: str, root: str | None, resolve: Resolver | None) -> str:
    """A path inside ``root``: relative paths are taken from the root, ``..`` is collapsed, symlinks resolved."""
    if root is None:
        raise CommandDenied(f"{what} is a path but the tool declares no root; paths must be bounded")
    if value.startswith("@"):
        raise CommandDenied(f"{what} {value!r} starts with '@', which reads a file; give the path alone")
    if not value or has_control(value):
        raise CommandDenied(f"{what} must be a non-empty path without control characters")
    joined = posixpath.normpath(value if value.startswith("/") else posixpath.join(root, value))
    if joined.startswith("//"):
        joined = "/" + joined.lstrip("/")
    if not within(joined, root):
        raise CommandDenied(f"{what} {value!r} resolves to {joined}, outside the allowed root {root}")
    if resolve is not None:
        real = resolve(joined)
        if not within(real, resolve(root)):
            raise CommandDenied(f"{what} {value!r} resolves through a symlink to {real}, outside the root {root}")
    return joined


def within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def check_value(kind: ValueKind, what: str, value: str, *, choices: list[str], pattern: str | None,
                root: str | None, allowed_hosts: list[str], url_paths: list[str], resolve: Resolver | None) -> str:
    if kind == "url":
        return check_url(what, value, allowed_hosts, url_paths)
    if kind == "path":
        return check_path(what, value, root, resolve)
    if kind == "integer":
        return check_integer(what, value)
    if kind == "enum":
        return check_enum(what, value, choices)
    if kind == "form":
        return check_form(what, value)
    if kind == "json":
        return check_json(what, value)
    return check_text(what, value, pattern)
