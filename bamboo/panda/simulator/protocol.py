"""The real PanDA server's request handling, reproduced: who is calling, how arguments are read, what comes back.

What a client can observe, and therefore what the simulator must do the same way:

* every answer to a known method is HTTP 200 with an envelope ``{"success", "message", "data"}``, also for
  a wrong method, a missing, unknown or mistyped argument, a refusal and "not found"; the body is JSON
  only when the request sends ``Accept: application/json`` or a JSON Content-Type, otherwise it is
  Python's ``str()`` of the envelope; the Content-Type header says ``text/plain`` either way;
* datetimes are encoded as ``{"__datetime__": iso}``;
* non-200 answers are plain text: 403 for a method the API does not have or a bearer token that does
  not authenticate (the VO comes from the ``Origin`` header; without it every token call is refused),
  500 for a crash;
* checks run in the server's order: secure connection (a client DN), production role, HTTP method,
  argument binding, argument types, task ownership.

A GET's arguments are strings and are cast to the declared type (``int`` via ``float``, ``bool`` from
"true"/"1"); a JSON POST's arguments keep their JSON type and are only checked, so ``"1003"`` is not an
int there, and a form-encoded POST sends only strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from starlette.responses import Response

REQUIRED = object()
MESSAGE_SSL = "SSL secure connection is required"
MESSAGE_PROD_ROLE = "production or pilot role required"
MESSAGE_TASK_OWNER = "not the task owner or no production role"
MESSAGE_TASK_ID = "jediTaskID must be an integer"
_PRODUCTION_RE = re.compile(r"^/[^/]+(/[^/]+)*/Role=production")


class Envelope(dict):
    """The ``{"success", "message", "data"}`` answer of every API method."""

    @classmethod
    def ok(cls, data: Any = None, message: str = "") -> "Envelope":
        return cls(success=True, message=message, data=data)

    @classmethod
    def fail(cls, message: str, data: Any = None) -> "Envelope":
        return cls(success=False, message=message, data=data)


@dataclass(frozen=True)
class Param:
    """One argument of an API method: its name, the type the server declares (None = undeclared) and default."""

    name: str
    kind: type | str | None = None  # int, bool, str, "list[int]", "list[str]", "list", "dict|str"
    default: Any = REQUIRED


@dataclass(frozen=True)
class Caller:
    """Who the server thinks is calling: the client DN (x509, or the token's holder) and VOMS FQANs."""

    dn: str | None
    fqans: tuple[str, ...] = ()
    production_dns: tuple[str, ...] = ()

    @property
    def secure(self) -> bool:
        return bool(self.dn) and "/CN=limited proxy" not in (self.dn or "")

    @property
    def user(self) -> str:
        return compact_user(self.dn or "")

    @property
    def production(self) -> bool:
        if any(p in (self.dn or "") for p in self.production_dns):
            return True
        return any(_PRODUCTION_RE.search(f) for f in self.fqans)


@dataclass
class Endpoint:
    """An API method: where it lives, which checks guard it, its arguments and its handler."""

    module: str
    name: str
    handler: Callable[..., Envelope]
    params: tuple[Param, ...] = ()
    method: str | None = None
    secure: bool = True
    production: bool = False
    task_owner: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def compact_user(dn: str) -> str:
    """The user name PanDA derives from a DN (its last CN, without proxy and numeric parts)."""
    name = re.sub(r"/(DC|O|OU|C|L)=[^/]+", "", dn)
    name = re.sub(r"/CN=[0-9]+", "", name)
    name = re.sub(r" [0-9]+", "", name)
    name = re.sub(r"_[0-9]+", "", name)
    name = name.replace("/CN=proxy", "").replace("/CN=limited proxy", "").replace("limited proxy", "")
    name = re.sub(r"/CN=Robot:[^/]+", "", name)
    name = re.sub(r"/CN=nickname:[^/]+", "", name)
    two = re.match(r".*/CN=([^/]+)/CN=([^/]+)", name)
    name = two.group(2) if two else name.replace("/CN=", "")
    return name.strip()


class ArgumentProblem(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def bind(endpoint: Endpoint, raw: dict[str, Any], request_method: str) -> dict[str, Any]:
    """The arguments the handler gets, or ArgumentProblem with the server's message."""
    names = {p.name for p in endpoint.params}
    for key in raw:
        if key not in names:
            raise ArgumentProblem(f"Argument error: got an unexpected keyword argument '{key}'")
    for p in endpoint.params:
        if p.default is REQUIRED and p.name not in raw:
            raise ArgumentProblem(f"Argument error: missing a required argument: '{p.name}'")
    bound: dict[str, Any] = {}
    for p in endpoint.params:
        if p.name not in raw:
            bound[p.name] = p.default
            continue
        value = raw[p.name]
        if p.kind is None or (p.default is not REQUIRED and value == p.default):
            bound[p.name] = value
            continue
        if request_method == "GET":
            value = _cast(p, value)
        _check(p, value)
        bound[p.name] = value
    return bound


def _type_name(kind: Any) -> str:
    return kind.__name__ if isinstance(kind, type) else str(kind).split("[")[0]


def _cast(p: Param, value: Any) -> Any:
    try:
        if value == "None" and p.default is None:
            return None
        if p.kind is str:
            return value
        if p.kind is bool:
            return str(value).lower() in ("true", "1")
        if p.kind is int:
            return int(float(value))
        if isinstance(p.kind, str) and p.kind.startswith("list"):
            items = [value] if isinstance(value, str) else list(value)
            if p.kind == "list[int]":
                return [int(float(i)) for i in items]
            return items
        return value
    except (ValueError, TypeError) as exc:
        raise ArgumentProblem(
            f"Type error: '{p.name}' with value '{value}' could not be casted to type {_type_name(p.kind)} "
            f"from {type(value).__name__}.") from exc


def _check(p: Param, value: Any) -> None:
    if p.kind == "dict|str" or p.kind is None:
        return
    if isinstance(p.kind, str) and p.kind.startswith("list"):
        if not isinstance(value, list):
            raise ArgumentProblem(f"Type error: '{p.name}' must be of type list, got {type(value).__name__}.")
        inner = {"list[int]": int, "list[str]": str}.get(p.kind)
        if inner is not None and not all(isinstance(i, inner) for i in value):
            raise ArgumentProblem(f"Type error: All elements in '{p.name}' must be {inner.__name__}.")
        return
    if value is None and p.default is None:
        return
    assert isinstance(p.kind, type)  # every string kind is handled above
    if not isinstance(value, p.kind):
        raise ArgumentProblem(f"Type error: '{p.name}' must be of type {_type_name(p.kind)}, got {type(value).__name__}.")


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, set):
        return sorted(value)
    raise TypeError(f"Type not serializable for {value} ({type(value)})")


def render(result: Any, json_app: bool) -> Response:
    """The body as the server writes it: JSON when asked for, else ``str()``; always ``text/plain``."""
    if json_app:
        body = json.dumps(result, default=_encode)
    elif isinstance(result, str):
        body = result
    else:
        body = str(dict(result) if isinstance(result, Envelope) else result)
    return text(200, body)


def text(status: int, body: str) -> Response:
    """A plain-text answer with the server's bare ``Content-Type: text/plain`` (no charset)."""
    return Response(body.encode(), status_code=status, headers={"content-type": "text/plain"})
