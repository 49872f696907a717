"""Typed PanDA failures, so a tool can tell "PanDA said no" from "PanDA had nothing" from "PanDA could not
be reached".

The real server answers almost everything with HTTP 200 and ``success: false`` in its envelope, so these
types come from the envelope's message and data code as much as from the HTTP status.
"""

from __future__ import annotations


class PandaError(Exception):
    """Base class: every failure talking to PanDA or its monitor."""


class PandaConfigError(PandaError):
    """The client cannot be built from the settings (e.g. OIDC chosen but no token or no VO)."""


class PandaUnavailable(PandaError):
    """Connection refused, DNS failure or timeout: the service did not answer."""


class PandaHttpError(PandaError):
    """The service answered with an HTTP error status (PanDA: 403 for an unknown method or a refused token,
    500 for a crash; the monitor: any)."""

    def __init__(self, status_code: int, url: str, detail: str = "") -> None:
        self.status_code = status_code
        self.url = url
        self.detail = detail
        super().__init__(f"HTTP {status_code} from {url}" + (f": {detail}" if detail else ""))


class PandaAuthError(PandaHttpError):
    """PanDA refused the credentials (HTTP 403 "Token authentication failed")."""

    def __str__(self) -> str:
        return (f"PanDA refused the OIDC token ({self.detail}); check BAMBOO_PANDA_OIDC_TOKEN and "
                "BAMBOO_PANDA_AUTH_VO (the VO is sent as the Origin header)")


class PandaNotFound(PandaError):
    """The task, job or log does not exist (PanDA says so in its envelope; the monitor with HTTP 404)."""

    def __init__(self, endpoint: str, detail: str = "") -> None:
        self.endpoint = endpoint
        self.detail = detail
        super().__init__(f"{endpoint}: {detail}" if detail else endpoint)


class PandaApiError(PandaError):
    """The API answered but reported ``success: false`` (or an answer that is not an envelope)."""

    def __init__(self, endpoint: str, message: str, code: int | None = None) -> None:
        self.endpoint = endpoint
        self.message = message
        self.code = code
        super().__init__(f"PanDA {endpoint} failed: {message}")


class PandaRefused(PandaApiError):
    """PanDA refused a state-changing command (not the owner, no production role, wrong task status);
    ``message`` is the server's own words, which the operator should see."""

    def __init__(self, endpoint: str, message: str, code: int | None = None) -> None:
        super().__init__(endpoint, message, code)
        Exception.__init__(self, f"PanDA refused {endpoint}: {message}" + (f" (code {code})" if code else ""))


class LogHostNotAllowed(PandaError):
    """A linked log URL points at a host outside the allowlist; it is never fetched."""
