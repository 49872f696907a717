"""Headers on every console response: no page may be framed, and no page runs script.

Another origin framed a signed-in review page: the person's cookie went with the frame (a different port on
the same host is the same site), so a page that overlays the frame could steer clicks onto "approve". Every
response therefore says ``X-Frame-Options: DENY`` and ``frame-ancestors 'none'``. The console serves no
script at all (its pages reload themselves with a meta refresh), so its policy allows none, and loads
only its own stylesheets and images; forms may post only to the console itself.

No page's address (session ids, review paths) is sent to another site as a referrer. The policy is
``same-origin``, not ``no-referrer``: under ``no-referrer`` a browser sends ``Origin: null`` with every form,
and the console refuses forms whose origin is not its own, so no one could sign in.

The headers are added outside every other layer, so error pages (404, 405, 500 and the console's own) carry
them as the pages do.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class SecurityHeaders:
    """ASGI wrapper that sets ``SECURITY_HEADERS`` on every HTTP response, replacing any the app set."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
