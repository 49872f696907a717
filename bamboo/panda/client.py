"""Async client for the PanDA API v1 (as the real server 1.0.4 speaks it) and the monitor's log browser.

What the real server does, and this client therefore handles (see the contract tests):

* every answer is an envelope ``{"success", "message", "data"}``, JSON only because we send
  ``Accept: application/json``; not found and refusals come as HTTP 200 with ``success: false``, so they
  are mapped to ``PandaNotFound`` / ``PandaRefused`` from the message and the data code;
* datetimes come as ``{"__datetime__": iso}`` and are decoded to ISO strings (plain JSON for the tools);
* OIDC needs the bearer token *and* ``Origin: <vo>`` (the server takes the VO from it; without it every
  call is a 403), x509 a proxy certificate;
* ``task/get_tasks_detailed_info_since`` takes ``since`` as ``%Y-%m-%d %H:%M:%S`` only, its filters as one
  JSON string of string values, and returns only the caller's tasks unless the filters name a userName;
* kill and retry only register a command that JEDI executes minutes later: they return a receipt that
  says "registered", and ``wait_for_status`` polls the task for the change, within a bound.

Two rules keep the worker safe from what comes back (its event loop belongs to Temporal, see
``bamboo.offload``):

* bodies are read as a stream with a byte cap (``MAX_API_BYTES`` for the API, ``MAX_LOG_BYTES`` for logs),
  counted on the decoded bytes, so a huge or gzip-inflated answer never sits whole in memory; large API
  answers are parsed in the offload pool, not on the loop;
* links found in task data (``fetch_linked_log``) are fetched with a second HTTP client that carries no
  credential at all (no token, no ``Origin``, no client certificate) and follows no redirect: task data is
  written by users, and a link to e.g. a command endpoint of the API host must not become a credentialed
  request of the worker. A link is fetched only from the API's or the monitor's origin (scheme, host and
  port) or a log host the deployment names, and never from the API's own paths (the legacy methods take a
  GET); the monitor's log browser is asked the same way, without the API's credential.

Every failure is a typed exception (see ``errors``) rather than an empty value, so the tools built on top
can tell the operator "PanDA had nothing" apart from "PanDA could not be asked" and "PanDA said no". The
transport is injectable so tests and the demo talk to the simulator through exactly this code.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import json
import os
import posixpath
import re
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urljoin, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr

from bamboo.offload import BudgetExceeded, in_thread
from bamboo.panda.errors import (
    LogHostNotAllowed,
    PandaApiError,
    PandaAuthError,
    PandaConfigError,
    PandaHttpError,
    PandaNotFound,
    PandaRefused,
    PandaUnavailable,
)
from bamboo.settings import Settings

DEFAULT_TIMEOUT_S = 30.0
# What a job log tool reads of a log: the body is streamed and reading stops here (logs reach gigabytes).
MAX_LOG_BYTES = 2_000_000
# The largest API answer read, in decoded bytes. The biggest real answers are job lists: the server
# returns at most 5500 jobs (task/get_job_descriptions, job/get_description_incl_archive) of about 3.5 KB
# each as JSON, i.e. about 20 MB; 64 MiB leaves room for jobs with long file lists and verbose task
# records, and keeps a broken or hostile answer from taking the worker's memory (200k jobs: 122 MB,
# 675 MB of RSS once parsed).
MAX_API_BYTES = 64 * 1024 * 1024
# Answers up to this size are parsed on the loop (well under a millisecond); larger ones in the offload
# pool, where parsing 64 MiB takes about a second without stopping heartbeats.
INLINE_DECODE_BYTES = 64 * 1024
DECODE_BUDGET_S = 60.0
# What is read of an error answer (403/500 text, which can carry a traceback) to say one line about it.
ERROR_BODY_BYTES = 64 * 1024


class PandaAuth(BaseModel):
    """How requests prove who they come from: nothing, an OIDC bearer token, or an X.509 proxy."""

    model_config = ConfigDict(frozen=True)

    mode: Literal["none", "oidc", "x509"] = "none"
    oidc_token: SecretStr | None = None
    vo: str | None = None
    x509_proxy: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> "PandaAuth":
        return cls(mode=settings.panda_auth, oidc_token=settings.panda_oidc_token, vo=settings.panda_auth_vo,
                   x509_proxy=settings.panda_x509_proxy)

    def headers(self) -> dict[str, str]:
        """OIDC: the token and the VO it is for, in ``Origin`` (as panda-client sends ``PANDA_AUTH_VO``)."""
        if self.mode != "oidc":
            return {}
        token = self.oidc_token.get_secret_value() if self.oidc_token else ""
        if not token:
            raise PandaConfigError(
                "panda_auth is 'oidc' but no token is configured: set BAMBOO_PANDA_OIDC_TOKEN "
                "(or choose BAMBOO_PANDA_AUTH=none/x509)"
            )
        if not self.vo:
            raise PandaConfigError(
                "panda_auth is 'oidc' but no VO is configured: set BAMBOO_PANDA_AUTH_VO (e.g. atlas); "
                "PanDA refuses a token without the VO in the Origin header"
            )
        return {"Authorization": f"Bearer {token}", "Origin": self.vo}

    def ssl_context(self) -> ssl.SSLContext | None:
        """For X.509 the proxy file holds both certificate and key; other modes use default verification."""
        if self.mode != "x509":
            return None
        proxy = self.x509_proxy
        if proxy is None or not proxy.expanduser().is_file():
            raise PandaConfigError(
                f"panda_auth is 'x509' but the proxy file {proxy!s} does not exist: set "
                "BAMBOO_PANDA_X509_PROXY to a valid proxy (e.g. the output of voms-proxy-init)"
            )
        context = self.verify_context()
        try:
            context.load_cert_chain(str(proxy.expanduser()))
        except (ssl.SSLError, OSError) as exc:
            raise PandaConfigError(f"cannot load X.509 proxy {proxy}: {exc}") from exc
        return context

    def verify_context(self) -> ssl.SSLContext:
        """Server verification only, never a client certificate: for X.509 setups the grid CAs of
        ``X509_CERT_DIR`` are trusted too (PanDA and monitor hosts usually have grid certificates). This is
        what the uncredentialed log client uses, and what ``ssl_context`` adds the proxy to."""
        context = ssl.create_default_context()
        ca_dir = os.environ.get("X509_CERT_DIR")
        if ca_dir and self.mode == "x509":  # grid CAs are usually not in the system store
            try:
                context.load_verify_locations(capath=ca_dir)
            except (ssl.SSLError, OSError) as exc:
                raise PandaConfigError(f"cannot load the CA directory X509_CERT_DIR={ca_dir}: {exc}") from exc
        return context


SINCE_FORMAT = "%Y-%m-%d %H:%M:%S"
DEFAULT_DATASET_TYPES = ("input", "pseudo_input")
MAX_WAIT_S = 600.0
# Messages of the server's ``success: false`` answers that mean "there is no such thing".
_NOT_FOUND_RE = re.compile(r"\bnot found\b|^No data found", re.I)
# Command codes the server puts in ``data`` (the same for kill, retry, finish, pause, resume).
CODE_REGISTERED, CODE_SERVER_ERROR, CODE_NOT_FOUND, CODE_DENIED, CODE_WRONG_STATUS = 0, 1, 2, 3, 4


def _wire_object(value: dict[str, Any]) -> Any:
    """PanDA encodes datetimes as ``{"__datetime__": iso}``; tools want plain ISO strings.

    A ``json.loads`` object hook rather than a walk afterwards: no second pass over a large answer, no
    recursion limit, and, being Python code called for every object, it gives the parsing thread a point
    to hand the GIL back to the event loop (a parse without a hook is one long C call that keeps it)."""
    if len(value) == 1 and "__datetime__" in value:
        return value["__datetime__"]
    return value


def _decode_json(body: _Body) -> Any:
    """The answer's JSON with datetimes decoded (see ``_wire_object``); joins the body's chunks first, so
    for a large answer that copy too happens off the loop."""
    return json.loads(body.join(), object_hook=_wire_object)


@dataclass(frozen=True)
class _Body:
    """A response body read up to a cap: its chunks as they came (joined where they are used, so a large
    body is copied once, in the offload pool), their total size, and whether there was more (not read)."""

    chunks: list[bytes]
    size: int
    over: bool

    def join(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes, without joining the rest."""
        out = bytearray()
        for chunk in self.chunks:
            out += chunk[: n - len(out)]
            if len(out) >= n:
                break
        return bytes(out)


def format_since(since: datetime | str) -> str:
    """The only form the server parses: ``%Y-%m-%d %H:%M:%S`` in UTC (an ISO ``T`` is rejected)."""
    if isinstance(since, str):
        try:
            moment = datetime.fromisoformat(since.strip())
        except ValueError as exc:
            raise ValueError(f"since {since!r} is not a date and time; give e.g. '2026-11-01 12:00:00'") from exc
    else:
        moment = since
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment.strftime(SINCE_FORMAT)


def filters_param(filters: dict[str, Any]) -> str:
    """Filters as the server takes them: one JSON object of string values (a number there crashes it;
    None means the attribute is empty, i.e. ``"NULL"``)."""
    return json.dumps({k: "NULL" if v is None else str(v) for k, v in filters.items()})


class CommandReceipt(BaseModel):
    """PanDA registered a command for a task; JEDI carries it out later, so the status has not changed yet."""

    task_id: int
    command: Literal["kill", "retry"]
    registered: bool = True
    code: int = CODE_REGISTERED
    message: str


class StatusWait(BaseModel):
    """What polling a task's status found: its status at the end, whether it reached what was waited for."""

    task_id: int
    status: str
    reached: bool
    waited_s: float
    polls: int


Origin = tuple[str, str, int]
_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> Origin:
    """(scheme, host, port) of an http(s) URL; ValueError for any other or a malformed port."""
    parts = urlsplit(url)
    if parts.scheme not in _PORTS or not parts.hostname:
        raise ValueError(url)
    return parts.scheme, parts.hostname.lower(), parts.port or _PORTS[parts.scheme]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _extra_origins(entries: list[str]) -> set[Origin]:
    """A log host the deployment names ("host" or "host:port"), over http or https, on the port it names or the
    scheme's own: a link to another port of an allowed host (a database's, a daemon's) is not a log."""
    origins: set[Origin] = set()
    for entry in entries:
        host, _, port = entry.strip().lower().partition(":")
        for scheme, default in _PORTS.items():
            origins.add((scheme, host, int(port) if port.isdigit() else default))
    return origins


def _api_paths(api_url: str) -> tuple[str, ...]:
    """Where the API host serves the API (the configured prefix, and the legacy methods, which take a GET)."""
    prefix = urlsplit(api_url).path.rstrip("/")
    return tuple(p for p in (prefix + "/" if prefix else "", "/server/panda/") if p)


class PandaClient:
    """One connection pool to the API and the monitor; use as ``async with`` or call ``aclose()``."""

    def __init__(
        self,
        api_url: str,
        monitor_url: str,
        auth: PandaAuth | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        log_host_allowlist: list[str] | None = None,
    ) -> None:
        """``transport`` (tests, the simulator) serves both HTTP clients; it must not carry a client
        certificate of its own, since links from task data are fetched through it too (the credentials
        this class adds, headers and the X.509 proxy, go to the API client only)."""
        self.api_url = api_url.rstrip("/")
        self.monitor_url = monitor_url.rstrip("/")
        self.auth = auth or PandaAuth()
        api = urlsplit(self.api_url)
        if self.auth.mode == "oidc" and api.scheme == "http" and not _loopback(api.hostname or ""):
            raise PandaConfigError(f"the PanDA API {self.api_url} is plain http, so the OIDC token would cross the "
                                   "network in clear text; give an https URL (plain http only on this machine)")
        context = self.auth.ssl_context()
        self._http = httpx.AsyncClient(
            headers={"Accept": "application/json", **self.auth.headers()},
            timeout=timeout_s,
            transport=transport,
            verify=context if context is not None else True,
            follow_redirects=False,
        )
        # Links from task data: no credential of any kind (no auth headers, no Origin, server verification
        # only), no redirects, its own cookie jar; see the module docstring.
        self._log_http = httpx.AsyncClient(
            timeout=timeout_s,
            transport=transport,
            verify=self.auth.verify_context() if self.auth.mode == "x509" else True,
            follow_redirects=False,
        )
        self.log_origins: frozenset[Origin] = frozenset(
            {_origin(self.api_url), _origin(self.monitor_url), *_extra_origins(log_host_allowlist or [])})

    @classmethod
    def from_settings(cls, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> "PandaClient":
        return cls(
            settings.panda_api_url,
            settings.panda_monitor_url,
            PandaAuth.from_settings(settings),
            transport=transport,
            log_host_allowlist=settings.panda_log_hosts,
        )

    async def __aenter__(self) -> "PandaClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        try:
            await self._http.aclose()
        finally:
            await self._log_http.aclose()

    # --- API v1: reads ---------------------------------------------------------------------------

    async def get_task(self, task_id: int) -> dict[str, Any]:
        """The task record (task/get_detailed_info); raises PandaNotFound when PanDA has no such task."""
        data = await self._api("GET", "task/get_detailed_info", params={"task_id": task_id})
        if not isinstance(data, dict):
            raise PandaApiError("task/get_detailed_info", f"expected a task object, got {type(data).__name__}")
        return data

    async def get_task_status(self, task_id: int) -> str:
        """Just the status (task/get_status): what to poll after a command."""
        data = await self._api("GET", "task/get_status", params={"task_id": task_id})
        if not isinstance(data, str):
            raise PandaApiError("task/get_status", f"expected a status string, got {type(data).__name__}")
        return data

    async def get_job_descriptions(self, task_id: int, *, unsuccessful_only: bool = False) -> list[dict[str, Any]]:
        """The task's jobs (all, or failed/cancelled/closed only); a task without jobs is ``[]``."""
        params: dict[str, Any] = {"task_id": task_id, "unsuccessful_only": "true" if unsuccessful_only else "false"}
        return self._as_list("task/get_job_descriptions", await self._api("GET", "task/get_job_descriptions", params=params))

    async def get_jobs(self, panda_ids: Iterable[int]) -> list[dict[str, Any] | None]:
        """Job records by PandaID, active or archived (job/get_description_incl_archive); ``None`` where
        PanDA has no such job, in the order asked."""
        ids = [int(i) for i in panda_ids]
        data = await self._api("POST", "job/get_description_incl_archive", json={"job_ids": ids})
        return self._as_list("job/get_description_incl_archive", data)

    async def get_datasets_and_files(
        self, task_id: int, *, dataset_types: Iterable[str] = DEFAULT_DATASET_TYPES
    ) -> list[dict[str, Any]]:
        """``[{"dataset": {"name", "id"}, "files": [{"lfn", "scope", "id", "status"}]}]`` for the given types.

        The server answers "No data found for the task" both for a task without such datasets and for no
        task at all; both are ``[]`` here (ask ``get_task`` to tell them apart)."""
        endpoint = "task/get_datasets_and_files"
        try:
            data = await self._api("GET", endpoint, params={"task_id": task_id, "dataset_types": list(dataset_types)})
        except PandaNotFound:
            return []
        return self._as_list(endpoint, data)

    async def get_tasks_since(
        self, since: datetime | str | None = None, *, filters: dict[str, Any] | None = None, n_tasks: int | None = None
    ) -> list[dict[str, Any]]:
        """Task records modified since ``since`` (the server caps it at 90 days back), narrowed by attribute
        ``filters`` (plain values match exactly, values with regex characters as a regex). Only the caller's
        own tasks unless ``filters`` names a ``userName``."""
        params: dict[str, Any] = {}
        if since is not None:
            params["since"] = format_since(since)
        if filters:
            params["filters"] = filters_param(filters)
        if n_tasks is not None:
            params["n_tasks"] = int(n_tasks)
        endpoint = "task/get_tasks_detailed_info_since"
        return self._as_list(endpoint, await self._api("GET", endpoint, params=params))

    # --- API v1: commands ------------------------------------------------------------------------

    async def kill_task(self, task_id: int) -> CommandReceipt:
        """Ask PanDA to kill a task. Returns once the command is *registered*; raises PandaRefused with the
        server's message when it is not (not the owner, no production role, a status that cannot be killed)."""
        return await self._command("kill", task_id)

    async def retry_task(self, task_id: int) -> CommandReceipt:
        """Ask PanDA to retry a task; a refused retry (e.g. a task in done status) raises PandaRefused even
        though the server says ``success: true`` for it."""
        return await self._command("retry", task_id)

    async def wait_for_status(
        self, task_id: int, until: Iterable[str] | None = None, *, changed_from: str | None = None,
        timeout_s: float = 60.0, interval_s: float = 5.0,
    ) -> StatusWait:
        """Poll the task's status until it is one of ``until`` (or differs from ``changed_from``), at most
        ``timeout_s`` (capped at 600 s). Never raises for "not yet": ``reached`` says whether it happened."""
        wanted = set(until or ())
        if not wanted and changed_from is None:
            raise ValueError("say what to wait for: statuses in until=, or the status it must leave (changed_from=)")
        bound = min(max(timeout_s, 0.0), MAX_WAIT_S)
        started = time.monotonic()
        polls = 0
        while True:
            status = await self.get_task_status(task_id)
            polls += 1
            reached = status in wanted if wanted else status != changed_from
            waited = time.monotonic() - started
            if reached or waited + interval_s > bound:
                return StatusWait(task_id=task_id, status=status, reached=reached, waited_s=round(waited, 3), polls=polls)
            await asyncio.sleep(interval_s)

    async def _command(self, command: Literal["kill", "retry"], task_id: int) -> CommandReceipt:
        endpoint = f"task/{command}"
        body = await self._envelope("POST", endpoint, json={"task_id": int(task_id)})
        message = str(body.get("message") or "").strip()
        code = body.get("data")
        if body.get("success") and code == CODE_REGISTERED:
            return CommandReceipt(task_id=task_id, command=command, code=code, message=message)
        if code == CODE_NOT_FOUND:
            raise PandaNotFound(endpoint, message or f"task_id={task_id} not found")
        if not body.get("success") and code is None and not message:
            raise PandaApiError(endpoint, "no message")
        # success:false (not the owner, a refused status) or success:true with a refusal code (retry)
        raise PandaRefused(endpoint, message or "refused without a message", code if isinstance(code, int) else None)

    # --- monitor log browser -----------------------------------------------------------------

    async def get_job_log(self, panda_id: int, filename: str = "payload.stdout") -> str:
        """The first ``MAX_LOG_BYTES`` of a job's log; reading stops there (logs reach gigabytes). The monitor is
        another service than the API: it is asked without the API's credential, as a linked log is."""
        url = f"{self.monitor_url}/filebrowser/"
        response, body = await self._send(self._log_http, "GET", url, MAX_LOG_BYTES, head=True,
                                          params={"pandaid": panda_id, "filename": filename})
        return _text(response, body.join())

    async def fetch_linked_log(self, url: str) -> str:
        """Fetch a log linked from errorDialog, but only from an allowlisted host (no arbitrary fetch), and
        without credentials: a GET through the uncredentialed client, redirects not followed, at most
        ``MAX_LOG_BYTES`` read."""
        parts = urlsplit(urljoin(self.monitor_url + "/", url))
        try:
            origin = _origin(parts.geturl())
        except ValueError:
            origin = None
        if origin is None or origin not in self.log_origins:
            allowed = ", ".join(f"{scheme}://{host}:{port}" for scheme, host, port in sorted(self.log_origins))
            raise LogHostNotAllowed(f"refusing to fetch {url!r}: its scheme, host and port are not among the log "
                                    f"origins allowed ({allowed}); add the host to BAMBOO_PANDA_LOG_HOSTS if it serves logs")
        # As the server could route it: decoded, dot segments resolved, repeated slashes merged.
        routed = posixpath.normpath("/" + unquote(parts.path).lstrip("/"))
        if origin == _origin(self.api_url) and (routed + "/").startswith(_api_paths(self.api_url)):
            raise LogHostNotAllowed(f"refusing to fetch {url!r}: it is an endpoint of the PanDA API, not a log")
        response, body = await self._send(self._log_http, "GET", parts.geturl(), MAX_LOG_BYTES, head=True)
        return _text(response, body.join())

    # --- plumbing ----------------------------------------------------------------------------

    async def _envelope(self, method: str, endpoint: str, **kwargs: Any) -> dict[str, Any]:
        """The decoded envelope, whatever ``success`` says (the caller interprets refusals). The body is
        read up to ``MAX_API_BYTES`` (past it: refused, not read on) and parsed off the loop when large."""
        response, raw = await self._send(self._http, method, f"{self.api_url}/{endpoint}", MAX_API_BYTES, **kwargs)
        if raw.over:
            raise PandaApiError(endpoint, f"the answer is larger than {MAX_API_BYTES // 2**20} MiB (MAX_API_BYTES), "
                                          "more than any PanDA answer should be; the rest was not read")
        try:
            if raw.size <= INLINE_DECODE_BYTES:
                body = _decode_json(raw)
            else:
                body = await in_thread(_decode_json, raw, budget_s=DECODE_BUDGET_S,
                                       what=f"parsing the {raw.size / 1e6:.1f} MB answer of {endpoint}")
        except BudgetExceeded as exc:
            raise PandaApiError(endpoint, str(exc)) from None
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser takes
            raise PandaApiError(endpoint, f"response is not JSON: {_text(response, raw.head(200))!r}") from exc
        if not isinstance(body, dict) or "success" not in body:
            raise PandaApiError(endpoint, "response has no 'success' field")
        return body

    async def _api(self, method: str, endpoint: str, **kwargs: Any) -> Any:
        body = await self._envelope(method, endpoint, **kwargs)
        if not body["success"]:
            message = str(body.get("message") or "no message").strip()
            if _NOT_FOUND_RE.search(message):
                raise PandaNotFound(endpoint, f"{message} ({_subject(kwargs)})")
            raise PandaApiError(endpoint, message, body.get("data") if isinstance(body.get("data"), int) else None)
        return body.get("data")

    async def _send(
        self, http: httpx.AsyncClient, method: str, url: str, limit: int, *, head: bool = False, **kwargs: Any
    ) -> tuple[httpx.Response, _Body]:
        """The response and at most ``limit`` bytes of its body (saying whether there was more, not read;
        ``head``: the first ``limit`` bytes of a longer body are wanted, see ``_read_capped``).

        The body is streamed and counted after content decoding, so the cap holds for a gzip answer too;
        an error status raises with one line of what the server said (a redirect is never followed)."""
        try:
            async with http.stream(method, url, **kwargs) as response:
                try:
                    if response.status_code >= 300:
                        error_body = await _read_capped(response, ERROR_BODY_BYTES, head=True)
                        raise _status_error(response, url, error_body.join())
                    body = await _read_capped(response, limit, head=head)
                except httpx.DecodingError as exc:
                    raise PandaHttpError(response.status_code, url, f"the answer cannot be decompressed: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise PandaUnavailable(f"timed out calling {url}") from exc
        except httpx.TransportError as exc:
            raise PandaUnavailable(f"cannot reach {url}: {exc}") from exc
        return response, body

    @staticmethod
    def _as_list(endpoint: str, data: Any) -> list[Any]:
        if data is None:
            return []
        if not isinstance(data, list):
            raise PandaApiError(endpoint, f"expected a list, got {type(data).__name__}")
        return data


def _subject(kwargs: dict[str, Any]) -> str:
    """What was asked for, so "not found" names it (the server's message does not)."""
    args = {**(kwargs.get("params") or {}), **(kwargs.get("json") or {})}
    return ", ".join(f"{k}={args[k]}" for k in ("task_id", "job_ids") if k in args) or "no arguments"


async def _read_capped(response: httpx.Response, limit: int, *, head: bool) -> _Body:
    """At most ``limit`` decoded bytes of the body, and whether there was more. Reading stops at the cap
    (the rest is never downloaded). ``head``: the first ``limit`` bytes are wanted even if there is more (a
    log); otherwise the caller refuses an oversized body, so a declared length over the cap of an
    uncompressed body stops it before the first byte. Chunks are kept as they come: no copy on the loop."""
    declared = response.headers.get("content-length", "")
    identity = response.headers.get("content-encoding", "identity") == "identity"
    if not head and identity and declared.isdigit() and int(declared) > limit:
        return _Body([], 0, True)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if len(chunk) > limit - size:
            chunks.append(chunk[: limit - size])
            return _Body(chunks, limit, True)
        chunks.append(chunk)
        size += len(chunk)
    return _Body(chunks, size, False)


def _text(response: httpx.Response, body: bytes) -> str:
    """The body as text in its declared charset (UTF-8 if none or unknown); a character cut by a byte cap
    becomes U+FFFD."""
    charset = response.charset_encoding or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        charset = "utf-8"
    return body.decode(charset, errors="replace")


def _status_error(response: httpx.Response, url: str, body: bytes) -> Exception:
    """The typed error of a non-2xx answer (PanDA: 403 text for a refused token, 500 for a crash)."""
    if response.is_redirect:
        location = response.headers.get("location", "?")[:200]
        return PandaHttpError(response.status_code, url, f"redirect to {location!r} not followed")
    text = _text(response, body)
    if response.status_code == 404:
        return PandaNotFound(url, _detail(text))
    if response.status_code == 403 and "Token authentication failed" in text:
        return PandaAuthError(403, url, _detail(text))
    return PandaHttpError(response.status_code, url, _detail(text))


def _detail(text: str) -> str:
    """One line of what the server said (its 403 text can carry a traceback)."""
    try:
        body = json.loads(text)
    except ValueError:
        lines = text.strip().splitlines()
        return lines[0][:200].removeprefix("ERROR : ") if lines else ""
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"]).splitlines()[0][:200]
    return text.strip().splitlines()[0][:200] if text.strip() else ""
