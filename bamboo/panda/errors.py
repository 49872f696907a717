"""Typed PanDA failures, so a tool can tell "PanDA said no" from "PanDA could not be reached"."""

from __future__ import annotations


class PandaError(Exception):
    """Base class: every failure talking to PanDA or its monitor."""


class PandaConfigError(PandaError):
    """The client cannot be built from the settings (e.g. OIDC chosen but no token)."""


class PandaUnavailable(PandaError):
    """Connection refused, DNS failure or timeout: the service did not answer."""


class PandaHttpError(PandaError):
    """The service answered with an HTTP error status."""

    def __init__(self, status_code: int, url: str, detail: str = "") -> None:
        self.status_code = status_code
        self.url = url
        self.detail = detail
        super().__init__(f"HTTP {status_code} from {url}" + (f": {detail}" if detail else ""))


class PandaNotFound(PandaHttpError):
    """The task, job or log does not exist (HTTP 404)."""


class PandaApiError(PandaError):
    """The API answered but reported ``success: false``."""

    def __init__(self, endpoint: str, message: str) -> None:
        self.endpoint = endpoint
        self.message = message
        super().__init__(f"PanDA {endpoint} failed: {message}")


class LogHostNotAllowed(PandaError):
    """A linked log URL points at a host outside the allowlist; it is never fetched."""
