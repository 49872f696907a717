"""Who is signed in to the console, for how long, and whether a form really came from a console page.

A sign-in is kept in Starlette's signed session cookie (itsdangerous), which expires after the
configured lifetime; the console also checks the sign-in's own expiry on every request, so an old cookie
replayed within the cookie's lifetime still ends on time. Every state-changing request is a POST that
must carry the session's CSRF token (a synchronizer token compared in constant time) and, when the browser
sends an Origin, come from the console's own origin. Signing in starts a fresh session, so a token or
cookie planted before sign-in is worthless after it.

A signed cookie cannot be taken back, so the cookie alone could not end a sign-in: a copy taken before
sign-out kept signing decisions until it expired. Each sign-in therefore also carries the *generation* of its
account (``accounts.LocalAccounts``: a random value kept in the accounts file, per local account and per
single-sign-on identity), and every request compares it with the file's. Signing out, setting a new password
and removing the account each change or remove that value, so every copy of every cookie of that account
ends at once (signing out in one browser signs the account out in all of them). State stays where the console
already keeps it, the accounts file; there is no session table to run.

Password checks are slow on purpose (Argon2id, ~0.1 s of CPU each), so the console runs them off its event
loop, a few at a time, and ``LoginThrottle`` refuses further attempts for a while after repeated failures
from one client address or for one account name.
"""

from __future__ import annotations

import hmac
import math
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request

from bamboo.frontends.console.accounts import LocalAccounts
from policy.identity import IdentityError, canonical_identity

CSRF_FIELD = "csrf"


class SignedIn(BaseModel):
    identity: str
    via: Literal["local", "oidc"]
    account: str  # whose generation this sign-in carries: the local account's name, or the sign-on's identity
    generation: str
    signed_in_at: float
    expires_at: float


def current_user(request: Request, accounts: LocalAccounts) -> SignedIn | None:
    """The person signed in, or None: no sign-in, an expired one, or one ended since (signed out, a new
    password, the account removed), whichever copy of the cookie carries it."""
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
    current = accounts.current_generation(user.via, user.account)
    if current is None or not hmac.compare_digest(current, user.generation):
        request.session.clear()
        flash(request, "error", "This sign-in was ended (signed out, a new password or the account removed); "
                                "sign in again.")
        return None
    return user


def sign_in(request: Request, identity: str, via: Literal["local", "oidc"], ttl_s: int, accounts: LocalAccounts,
            account: str) -> SignedIn:
    """Start a new session for ``identity``: nothing from before sign-in (token, flashes) survives. ``account``
    names whose generation it carries (the local account, or for single sign-on the identity)."""
    request.session.clear()
    now = time.time()
    generation = accounts.sign_in_generation(via, account) or ""  # "" (the account just went): ended at once
    user = SignedIn(identity=identity, via=via, account=account, generation=generation, signed_in_at=now,
                    expires_at=now + ttl_s)
    request.session["user"] = user.model_dump()
    request.session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return user


def sign_out(request: Request, accounts: LocalAccounts) -> None:
    """End this sign-in, and with it every other of the account (copies of this cookie included). Only a sign-in
    that is still valid can do so: an old copy cannot sign the person out again and again."""
    user = current_user(request, accounts)
    if user is not None:
        accounts.end_sign_ins(user.via, user.account)
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


@dataclass(frozen=True)
class Attempt:
    """A password check under way, counted as a failure until it succeeds."""

    keys: tuple[str, ...]
    at: float


class LoginThrottle:
    """Failed sign-ins in a sliding window, per client address and per account name (its canonical spelling,
    so ``Bob`` and ``bob`` count together; a name that cannot be an identity counts only for its address).

    An attempt counts from the moment it starts, so a burst of concurrent guesses is limited as a sequence of
    them is; a success removes its own count and forgets the name's failures. A name at its limit is refused
    to everyone for the rest of the window, its rightful owner too: that is the price of stopping guesses at one
    account from many addresses, and the window is short. Memory is bounded: at most ``max_keys`` names and
    addresses, the stalest dropped first, each holding at most its limit of times. Runs on the event loop only
    (no lock).
    """

    def __init__(self, window_s: float, per_name: int, per_address: int, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.limits = {"name": per_name, "address": per_address}
        self.max_keys = max_keys
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    @staticmethod
    def _keys(address: str, name: str) -> tuple[str, ...]:
        keys = [f"address:{address}"]
        try:
            keys.append(f"name:{canonical_identity(name)}")
        except IdentityError:
            pass
        return tuple(keys)

    def _limit(self, key: str) -> int:
        return self.limits[key.partition(":")[0]]

    def _prune(self, now: float) -> None:
        while self._failures:
            key, times = next(iter(self._failures.items()))
            if times and times[-1] + self.window_s > now:
                break
            del self._failures[key]

    def retry_after(self, address: str, name: str) -> int | None:
        """Seconds until an attempt from ``address`` for ``name`` is taken again, or None when it is now."""
        now = self.clock()
        self._prune(now)
        waits = []
        for key in self._keys(address, name):
            times = self._failures.get(key)
            if not times:
                continue
            while times and times[0] + self.window_s <= now:
                times.popleft()
            limit = self._limit(key)
            if len(times) >= limit:
                waits.append(times[-limit] + self.window_s - now)
        return max(1, math.ceil(max(waits))) if waits else None

    def begin(self, address: str, name: str) -> Attempt:
        attempt = Attempt(self._keys(address, name), self.clock())
        for key in attempt.keys:
            self._failures.setdefault(key, deque()).append(attempt.at)
            self._failures.move_to_end(key)
        while len(self._failures) > self.max_keys:
            self._failures.popitem(last=False)
        return attempt

    def succeeded(self, attempt: Attempt) -> None:
        for key in attempt.keys:
            if key.startswith("name:"):
                self._failures.pop(key, None)
            elif (times := self._failures.get(key)) is not None and attempt.at in times:
                times.remove(attempt.at)
