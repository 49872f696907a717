"""Async client for the PanDA API v1 and the monitor's log browser.

Every failure is a typed exception (see ``errors``) rather than an empty value, so the tools built on
top can tell the operator "PanDA had nothing" apart from "PanDA could not be asked". The transport is
injectable so tests and the demo talk to the simulator through exactly this code.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr

from bamboo.panda.errors import (
    LogHostNotAllowed,
    PandaApiError,
    PandaConfigError,
    PandaHttpError,
    PandaNotFound,
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
    x509_proxy: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> "PandaAuth":
        return cls(mode=settings.panda_auth, oidc_token=settings.panda_oidc_token, x509_proxy=settings.panda_x509_proxy)

    def headers(self) -> dict[str, str]:
        if self.mode != "oidc":
            return {}
        token = self.oidc_token.get_secret_value() if self.oidc_token else ""
        if not token:
            raise PandaConfigError(
                "panda_auth is 'oidc' but no token is configured: set BAMBOO_PANDA_OIDC_TOKEN "
                "(or choose BAMBOO_PANDA_AUTH=none/x509)"
            )
        return {"Authorization": f"Bearer {token}"}

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


def _decode_wire(value: Any) -> Any:
    """PanDA encodes datetimes as ``{"__datetime__": iso}``; tools want plain ISO strings."""
    if isinstance(value, dict):
        if set(value) == {"__datetime__"}:
            return value["__datetime__"]
        return {k: _decode_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_wire(v) for v in value]
    return value


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

    # --- API v1 ------------------------------------------------------------------------------

    async def get_task(self, task_id: int) -> dict[str, Any]:
        """The task record; raises PandaNotFound when PanDA has no such task."""
        data = await self._api("GET", "task/get_detailed_info", params={"task_id": task_id})
        if not isinstance(data, dict):
            raise PandaApiError("task/get_detailed_info", f"expected a task object, got {type(data).__name__}")
        return data

    async def get_job_descriptions(self, task_id: int, *, unsuccessful_only: bool = False) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"task_id": task_id}
        if unsuccessful_only:
            params["unsuccessful_only"] = "true"
        return self._as_list("task/get_job_descriptions", await self._api("GET", "task/get_job_descriptions", params=params))

    async def get_datasets_and_files(self, task_id: int, *, dataset_only: bool = True) -> list[dict[str, Any]]:
        params = {"task_id": task_id, "dataset_only": "true" if dataset_only else "false"}
        endpoint = "task/get_datasets_and_files"
        return self._as_list(endpoint, await self._api("GET", endpoint, params=params))

    async def get_tasks_since(self, since: str, **filters: str) -> list[dict[str, Any]]:
        """Tasks modified since an ISO timestamp, optionally narrowed by server-side filters."""
        endpoint = "task/get_tasks_detailed_info_since"
        return self._as_list(endpoint, await self._api("GET", endpoint, params={"since": since, **filters}))

    async def kill_task(self, task_id: int) -> Any:
        return await self._api("POST", "task/kill", json={"task_id": task_id})

    async def retry_task(self, task_id: int) -> Any:
        return await self._api("POST", "task/retry", json={"task_id": task_id})

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

    async def _api(self, method: str, endpoint: str, **kwargs: Any) -> Any:
        response = await self._send(method, f"{self.api_url}/{endpoint}", **kwargs)
        try:
            body = response.json()
        except ValueError as exc:
            raise PandaApiError(endpoint, f"response is not JSON: {response.text[:200]!r}") from exc
        if not isinstance(body, dict) or "success" not in body:
            raise PandaApiError(endpoint, "response has no 'success' field")
        if not body["success"]:
            raise PandaApiError(endpoint, str(body.get("message") or "no message"))
        return _decode_wire(body.get("data"))

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise PandaUnavailable(f"timed out calling {url}") from exc
        except httpx.TransportError as exc:
            raise PandaUnavailable(f"cannot reach {url}: {exc}") from exc
        if response.status_code == 404:
            raise PandaNotFound(404, url, _detail(response))
        if response.status_code >= 400:
            raise PandaHttpError(response.status_code, url, _detail(response))
        return response

    @staticmethod
    def _as_list(endpoint: str, data: Any) -> list[dict[str, Any]]:
        if data is None:
            return []
        if not isinstance(data, list):
            raise PandaApiError(endpoint, f"expected a list, got {type(data).__name__}")
        return data


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return response.text[:200]
