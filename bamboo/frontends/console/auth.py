"""Who is signed in to the console, for how long, and whether a form really came from a console page.

A sign-in is kept in Starlette's signed session cookie (itsdangerous), which expires after the
configured lifetime; the console also checks the sign-in's own expiry on every request, so an old cookie
replayed within the cookie's lifetime still ends on time. Every state-changing request is a POST that
must carry the session's CSRF token (a synchronizer token compared in constant time) and, when the browser
sends an Origin, come from the console's own origin. Signing in starts a fresh session, so a token or
cookie planted before sign-in is worthless after it.
"""

from __future__ import annotations

import hmac
import secrets
import time
from typing import Literal

from pydantic import BaseModel
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request

CSRF_FIELD = "csrf"


class SignedIn(BaseModel):
    identity: str
    via: Literal["local", "oidc"]
    signed_in_at: float
    expires_at: float


def current_user(request: Request) -> SignedIn | None:
    data = request.session.get("user")
    if not data:
        return None
    try:
        user = SignedIn.model_validate(data)
    except ValueError:
        request.session.clear()
        return None
    if user.expires_at <= time.time():
        request.session.clear()
        flash(request, "error", "Your sign-in expired; sign in again.")
        return None
    return user


def sign_in(request: Request, identity: str, via: Literal["local", "oidc"], ttl_s: int) -> SignedIn:
    """Start a new session for ``identity``: nothing from before sign-in (token, flashes) survives."""
    request.session.clear()
    now = time.time()
    user = SignedIn(identity=identity, via=via, signed_in_at=now, expires_at=now + ttl_s)
    request.session["user"] = user.model_dump()
    request.session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return user


def sign_out(request: Request) -> None:
    request.session.clear()


def csrf_token(request: Request) -> str:
    token = request.session.get(CSRF_FIELD)
    if not token:
        token = secrets.token_urlsafe(32)
        request.session[CSRF_FIELD] = token
    return token


async def checked_form(request: Request) -> FormData:
    """The POSTed form, or 403 when it lacks this session's CSRF token or comes from another origin."""
    origin = request.headers.get("origin")
    if origin and origin != f"{request.url.scheme}://{request.url.netloc}":
        raise HTTPException(403, "This form was sent from another site; use the console's own page.")
    form = await request.form()
    sent = form.get(CSRF_FIELD)
    expected = request.session.get(CSRF_FIELD)
    if not isinstance(sent, str) or not expected or not hmac.compare_digest(sent, expected):
        raise HTTPException(403, "This form is out of date or did not come from this console; reload the page "
                                 "and send it again.")
    return form


def flash(request: Request, level: Literal["ok", "error"], text: str) -> None:
    request.session.setdefault("flash", []).append([level, text])
    request.session["flash"] = request.session["flash"][-5:]


def take_flashes(request: Request) -> list[tuple[str, str]]:
    return [tuple(item) for item in request.session.pop("flash", [])]
