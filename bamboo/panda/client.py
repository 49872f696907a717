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

Every failure is a typed exception (see ``errors``) rather than an empty value, so the tools built on top
can tell the operator "PanDA had nothing" apart from "PanDA could not be asked" and "PanDA said no". The
transport is injectable so tests and the demo talk to the simulator through exactly this code.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr

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
MAX_LOG_BYTES = 2_000_000


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
        context = ssl.create_default_context()
        ca_dir = os.environ.get("X509_CERT_DIR")
        try:
            if ca_dir:  # grid CAs are usually not in the system store
                context.load_verify_locations(capath=ca_dir)
            context.load_cert_chain(str(proxy.expanduser()))
        except (ssl.SSLError, OSError) as exc:
            raise PandaConfigError(f"cannot load X.509 proxy {proxy}: {exc}") from exc
        return context


SINCE_FORMAT = "%Y-%m-%d %H:%M:%S"
DEFAULT_DATASET_TYPES = ("input", "pseudo_input")
MAX_WAIT_S = 600.0
# Messages of the server's ``success: false`` answers that mean "there is no such thing".
_NOT_FOUND_RE = re.compile(r"\bnot found\b|^No data found", re.I)
# Command codes the server puts in ``data`` (the same for kill, retry, finish, pause, resume).
CODE_REGISTERED, CODE_SERVER_ERROR, CODE_NOT_FOUND, CODE_DENIED, CODE_WRONG_STATUS = 0, 1, 2, 3, 4


def _decode_wire(value: Any) -> Any:
    """PanDA encodes datetimes as ``{"__datetime__": iso}``; tools want plain ISO strings."""
    if isinstance(value, dict):
        if set(value) == {"__datetime__"}:
            return value["__datetime__"]
        return {k: _decode_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_wire(v) for v in value]
    return value


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
        self.api_url = api_url.rstrip("/")
        self.monitor_url = monitor_url.rstrip("/")
        self.auth = auth or PandaAuth()
        context = self.auth.ssl_context()
        self._http = httpx.AsyncClient(
            headers={"Accept": "application/json", **self.auth.headers()},
            timeout=timeout_s,
            transport=transport,
            verify=context if context is not None else True,
            follow_redirects=False,
        )
        hosts = {urlsplit(self.api_url).hostname, urlsplit(self.monitor_url).hostname, *(log_host_allowlist or [])}
        self.log_host_allowlist: frozenset[str] = frozenset(h.lower() for h in hosts if h)

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
        await self._http.aclose()

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
        url = f"{self.monitor_url}/filebrowser/"
        response = await self._send("GET", url, params={"pandaid": panda_id, "filename": filename})
        return response.text[:MAX_LOG_BYTES]

    async def fetch_linked_log(self, url: str) -> str:
        """Fetch a log linked from errorDialog, but only from an allowlisted host (no arbitrary fetch)."""
        parts = urlsplit(urljoin(self.monitor_url + "/", url))
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or host not in self.log_host_allowlist:
            raise LogHostNotAllowed(
                f"refusing to fetch {url!r}: host {host or '(none)'} is not in the log host allowlist "
                f"{sorted(self.log_host_allowlist)}"
            )
        response = await self._send("GET", parts.geturl())
        return response.text[:MAX_LOG_BYTES]

    # --- plumbing ----------------------------------------------------------------------------

    async def _envelope(self, method: str, endpoint: str, **kwargs: Any) -> dict[str, Any]:
        """The decoded envelope, whatever ``success`` says (the caller interprets refusals)."""
        response = await self._send(method, f"{self.api_url}/{endpoint}", **kwargs)
        try:
            body = response.json()
        except ValueError as exc:
            raise PandaApiError(endpoint, f"response is not JSON: {response.text[:200]!r}") from exc
        if not isinstance(body, dict) or "success" not in body:
            raise PandaApiError(endpoint, "response has no 'success' field")
        return _decode_wire(body)

    async def _api(self, method: str, endpoint: str, **kwargs: Any) -> Any:
        body = await self._envelope(method, endpoint, **kwargs)
        if not body["success"]:
            message = str(body.get("message") or "no message").strip()
            if _NOT_FOUND_RE.search(message):
                raise PandaNotFound(endpoint, f"{message} ({_subject(kwargs)})")
            raise PandaApiError(endpoint, message, body.get("data") if isinstance(body.get("data"), int) else None)
        return body.get("data")

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise PandaUnavailable(f"timed out calling {url}") from exc
        except httpx.TransportError as exc:
            raise PandaUnavailable(f"cannot reach {url}: {exc}") from exc
        if response.status_code == 404:
            raise PandaNotFound(url, _detail(response))
        if response.status_code == 403 and "Token authentication failed" in response.text:
            raise PandaAuthError(403, url, _detail(response))
        if response.status_code >= 400:
            raise PandaHttpError(response.status_code, url, _detail(response))
        return response

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


def _detail(response: httpx.Response) -> str:
    """One line of what the server said (its 403 text can carry a traceback)."""
    try:
        body = response.json()
    except ValueError:
        lines = response.text.strip().splitlines()
        return lines[0][:200].removeprefix("ERROR : ") if lines else ""
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"]).splitlines()[0][:200]
    return response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
