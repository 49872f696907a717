"""The console's pages: server-rendered (Starlette + Jinja2), no script, live pages reload themselves.

Every page needs a signed-in person; every action is a POST with the session's CSRF token. Every response,
error pages included, forbids framing and script (``headers.SecurityHeaders``). A decision form
carries the turn and the full code hash the page showed, and the console sends exactly those: if the review
moved on (answered elsewhere, edited, a new turn), the session refuses the decision as stale and the page
says so. The person's identity comes from the sign-in only, never from a form field.

The knowledge pages (``/knowledge``, ``/knowledge/causes/{id}``) are read-only, for anyone signed in, and
bounded (a page of causes, the first incidents of a cause). What they show was written from incident text or
by a model, so it goes through the ``inert`` filter and autoescape like every such text; a cause is linked by
its id, never by its name.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from bamboo.frontends.console import auth
from bamboo.frontends.console.accounts import LocalAccounts
from bamboo.batch.contract import BATCH_SIGNALS
from bamboo.frontends.console.backend import ConsoleBackend, ConsoleError
from bamboo.frontends.console.headers import SecurityHeaders
from bamboo.frontends.console.render import code_html, diff_html, inert_filter, pygments_css
from bamboo.frontends.console.settings import ConsoleSettings
from bamboo.models.incident import task_problem
from bamboo.store.knowledge_browse import MAX_QUERY, PAGE_SIZE, whole_number
from bamboo.frontends.review import (
    CHOICE_KEYS, CHOICE_WORDS, because, context, edit_diff, effect, flagged_lines, grants_line, notes,
    procedure_effect, procedure_notes, reuse_change, said,
)
from policy.approvers import Role
from policy.decisions import DecisionKind
from policy.identity import IdentityError, canonical_identity

HERE = Path(__file__).parent
# Password checks (Argon2id, ~0.1 s of CPU and 64 MiB each) run in threads, at most this many at once: off the
# event loop that serves every page, and bounded, so a flood of sign-ins cannot take every core either.
PASSWORD_CHECKS = 2
Handler = Callable[[Request], Awaitable[Response]]


class ConsoleApp(Starlette):
    """The console's Starlette app with ``SecurityHeaders`` outside every layer, the server-error one included,
    so no response (a 500 either) leaves without them."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(backend: ConsoleBackend, settings: ConsoleSettings, accounts: LocalAccounts, cookie_secret: str,
               oidc: Any | None = None) -> Starlette:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["inert"] = inert_filter  # model and tool text: spelled inert, then autoescaped
    templates.env.globals.update(code_html=code_html, diff_html=diff_html, choice_words=CHOICE_WORDS,
                                 choice_keys=CHOICE_KEYS, oidc_label=settings.oidc_label)
    code_css = pygments_css()
    throttle = auth.LoginThrottle(settings.login_failure_window_s, settings.login_failures_per_name,
                                  settings.login_failures_per_address)
    password_checks = asyncio.Semaphore(PASSWORD_CHECKS)

    async def render(request: Request, name: str, status_code: int = 200, refresh: bool = False,
                     **context: Any) -> Response:
        user = auth.current_user(request, accounts)
        roles = await backend.roles(user.identity) if user else None
        return templates.TemplateResponse(request, name, {
            "user": user, "roles": roles, "csrf": auth.csrf_token(request), "flashes": auth.take_flashes(request),
            "refresh": settings.refresh_s if refresh else None, "oidc": oidc is not None, **context,
        }, status_code=status_code)

    def page(handler: Callable[[Request, auth.SignedIn], Awaitable[Response]]) -> Handler:
        async def wrapped(request: Request) -> Response:
            user = auth.current_user(request, accounts)
            if user is None:
                return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
            try:
                return await handler(request, user)
            except ConsoleError as exc:
                return await render(request, "error.html", status_code=409, message=str(exc))
        return wrapped

    def back(path: str) -> RedirectResponse:
        return RedirectResponse(path, status_code=303)

    # ------------------------------------------------------------------ sign-in
    async def login(request: Request) -> Response:
        if request.method == "GET":
            return await render(request, "login.html", next=request.query_params.get("next", "/"))
        form = await auth.checked_form(request)
        name, password, after = str(form.get("username", "")), str(form.get("password", "")), str(form.get("next", "/"))
        address = request.client.host if request.client else "unknown"
        wait = throttle.retry_after(address, name)
        if wait is not None:
            auth.flash(request, "error", f"Too many failed sign-ins for this name or from this address; try again in "
                                         f"{wait} s.")
            refused = await render(request, "login.html", status_code=429, next=after)
            refused.headers["Retry-After"] = str(wait)
            return refused
        attempt = throttle.begin(address, name)
        async with password_checks:
            account = await asyncio.to_thread(accounts.verify, name, password)
        if account is None:
            auth.flash(request, "error", "Wrong user name or password.")
            return await render(request, "login.html", status_code=401, next=after)
        throttle.succeeded(attempt)
        identity = await backend.account_identity(account)
        if identity is None:
            auth.flash(request, "error", f"The account {account} is not bound to an identity by an administrator; "
                                         f"ask one to run: bamboo console add-user {account} --identity YOU --admin ADMIN")
            return await render(request, "login.html", status_code=403, next=after)
        auth.sign_in(request, identity, "local", settings.session_ttl_s, accounts, account)
        return back(_local_path(after))

    async def logout(request: Request) -> Response:
        await auth.checked_form(request)
        auth.sign_out(request, accounts)
        return back("/login")

    async def oidc_login(request: Request) -> Response:
        if oidc is None:
            raise HTTPException(404, "single sign-on is not configured")
        return await oidc.sso.authorize_redirect(request, f"{settings.base_url()}/oidc/callback")

    async def oidc_callback(request: Request) -> Response:
        if oidc is None:
            raise HTTPException(404, "single sign-on is not configured")
        from authlib.common.errors import AuthlibBaseError
        from joserfc.errors import JoseError

        try:
            token = await oidc.sso.authorize_access_token(request)
        except (AuthlibBaseError, JoseError) as exc:  # refused code, bad state, forged or expired ID token
            why = getattr(exc, "description", None) or getattr(exc, "error", None) or type(exc).__name__
            auth.flash(request, "error", f"Single sign-on failed: {why}; try again.")
            return back("/login")
        claims = token.get("userinfo") or {}
        claim = settings.oidc_identity_claim
        identity, why = _claimed_identity(claim, claims.get(claim) if claim else None)
        if identity is None:
            auth.flash(request, "error", why)
            return back("/login")
        auth.sign_in(request, identity, "oidc", settings.session_ttl_s, accounts, identity)
        return back("/")

    # ------------------------------------------------------------------ reviews
    async def home(request: Request) -> Response:
        return back("/approvals")

    @page
    async def approvals_page(request: Request, user: auth.SignedIn) -> Response:
        found = await backend.pending()
        now = datetime.now(UTC)
        return await render(request, "approvals.html", refresh=True, pending=found,
                            effects={item.session_id: effect(item.view) for item in found},
                            contexts={item.session_id: context(item.view, now) for item in found})

    @page
    async def review_page(request: Request, user: auth.SignedIn) -> Response:
        session_id = request.path_params["session"]
        view = await backend.review(session_id)
        if view is None:
            return await render(request, "review.html", refresh=True, session_id=session_id, view=None)
        return await render(
            request, "review.html", session_id=session_id, view=view, effect=effect(view), notes=notes(view),
            said=said(view), context=context(view, datetime.now(UTC)), because=because(view), reuse_change=reuse_change(view),
            flagged=flagged_lines(view), procedures=[(p, procedure_effect(p), procedure_notes(p))
                                                     for p in view.procedures],
            mine=user.identity == view.requester, changed=edit_diff(view, await backend.transcript(session_id)),
            grants=grants_line(view),
        )

    @page
    async def decide(request: Request, user: auth.SignedIn) -> Response:
        session_id = request.path_params["session"]
        form = await auth.checked_form(request)
        try:
            turn = int(str(form.get("turn", "")))
            kind = DecisionKind(str(form.get("kind", "")))
        except ValueError:
            raise HTTPException(400, "The decision form is incomplete; reload the review and answer again.") from None
        replacement = str(form.get("replacement_code", "")) if kind is DecisionKind.EDIT else None
        try:
            ack = await backend.decide(user.identity, session_id, turn, str(form.get("code_hash", "")), kind,
                                       replacement, review=str(form.get("review", "")))
        except ConsoleError as exc:
            auth.flash(request, "error", f"Refused ({exc.refusal or 'error'}): {exc}")
            return back(f"/sessions/{quote(session_id)}/review")
        auth.flash(request, "ok", f"Turn {turn}: {user.identity} chose {CHOICE_WORDS[kind]} — {ack.detail}")
        return back(f"/sessions/{quote(session_id)}#turn-{turn}")

    # ------------------------------------------------------------------ sessions
    @page
    async def sessions_page(request: Request, user: auth.SignedIn) -> Response:
        return await render(request, "sessions.html", refresh=True, sessions=await backend.sessions())

    @page
    async def new_session(request: Request, user: auth.SignedIn) -> Response:
        if request.method == "GET":
            return await render(request, "new_session.html")
        form = await auth.checked_form(request)
        roles = await backend.roles(user.identity) or []
        if Role.REQUEST not in roles:
            raise ConsoleError(f"{user.identity} is not registered to ask for code here (role request); ask the "
                               "deployment to register you")
        task_text, symptom = str(form.get("task_id", "")).strip(), str(form.get("symptom", "")).strip() or None
        try:
            task_id = int(task_text) if task_text else None
        except ValueError:
            raise ConsoleError(f"task id {task_text!r} is not a number") from None
        if (task_id is None) == (symptom is None):
            raise ConsoleError("give either a task id or a symptom")
        if task_id is not None and (why := task_problem({"jediTaskID": task_id})):
            raise ConsoleError(f"task id: {why}")
        session_id = f"{user.identity}-{uuid.uuid4().hex[:8]}"
        await backend.start(user.identity, session_id, task_id, symptom,
                            startup_hypothesis=form.get("no_hypothesis") != "on")
        auth.flash(request, "ok", f"Session {session_id} opened.")
        return back(f"/sessions/{quote(session_id)}")

    @page
    async def session_page(request: Request, user: auth.SignedIn) -> Response:
        session_id = request.path_params["session"]
        status = await backend.session_status(session_id)
        entries = await backend.transcript(session_id)
        standing = await backend.approvals(session_id)
        view = await backend.review(session_id) if status == "running" else None
        return await render(request, "session.html", refresh=status == "running", session_id=session_id,
                            status=status, entries=entries, standing=standing, view=view, as_json=_as_json)

    @page
    async def ask(request: Request, user: auth.SignedIn) -> Response:
        session_id = request.path_params["session"]
        if request.method == "GET":
            return await render(request, "ask.html", session_id=session_id)
        form = await auth.checked_form(request)
        try:
            ack = await backend.ask(user.identity, session_id, str(form.get("text", "")).strip(),
                                    form.get("force_tool") == "on")
        except ConsoleError as exc:
            auth.flash(request, "error", f"Refused ({exc.refusal or 'error'}): {exc}")
            return back(f"/sessions/{quote(session_id)}")
        auth.flash(request, "ok", f"Sent: {ack.detail}")
        return back(f"/sessions/{quote(session_id)}")

    @page
    async def revoke(request: Request, user: auth.SignedIn) -> Response:
        session_id = request.path_params["session"]
        form = await auth.checked_form(request)
        target = str(form.get("target", "")).strip()
        try:
            ack = await backend.revoke(user.identity, session_id, target)
        except ConsoleError as exc:
            auth.flash(request, "error", f"Refused ({exc.refusal or 'error'}): {exc}")
        else:
            auth.flash(request, "ok", f"Revoke of {target}: {ack.detail}")
        return back(_local_path(str(form.get("back", "")) or f"/sessions/{quote(session_id)}"))

    @page
    async def grants_page(request: Request, user: auth.SignedIn) -> Response:
        return await render(request, "grants.html", refresh=True, grants=await backend.grants())

    # ------------------------------------------------------------------ batches and audit
    @page
    async def batches_page(request: Request, user: auth.SignedIn) -> Response:
        return await render(request, "batches.html", refresh=True, batches=await backend.batches(),
                            actions=BATCH_SIGNALS)

    @page
    async def batch_control(request: Request, user: auth.SignedIn) -> Response:
        form = await auth.checked_form(request)
        workflow_id, action = str(form.get("workflow_id", "")), str(form.get("action", ""))
        try:
            await backend.control_batch(user.identity, workflow_id, action)
        except ConsoleError as exc:
            auth.flash(request, "error", str(exc))
        else:
            auth.flash(request, "ok", f"{workflow_id}: {action} sent")
        return back("/batches")

    @page
    async def audit_page(request: Request, user: auth.SignedIn) -> Response:
        return await render(request, "audit.html", refresh=True, state=await backend.audit_state(),
                            as_json=_as_json)

    # ------------------------------------------------------------------ knowledge (read-only)
    @page
    async def knowledge_page(request: Request, user: auth.SignedIn) -> Response:
        query = request.query_params.get("q", "").strip()[:MAX_QUERY]
        number = _page_number(request.query_params.get("page", ""))
        found = await backend.knowledge(query, (number - 1) * PAGE_SIZE, PAGE_SIZE)

        def link(n: int) -> str:
            return "/knowledge?" + urlencode({**({"q": query} if query else {}), "page": n})
        return await render(request, "knowledge.html", found=found, number=number,
                            prev_url=link(number - 1) if number > 1 else None,
                            next_url=link(number + 1) if found.has_next else None)

    @page
    async def cause_page(request: Request, user: auth.SignedIn) -> Response:
        cause_id = request.path_params["cause_id"]
        detail = await backend.cause(cause_id)
        if detail is None:
            raise HTTPException(404, f"There is no cause {cause_id}; the knowledge page lists the known ones.")
        return await render(request, "cause.html", detail=detail)

    async def code_css_route(request: Request) -> Response:
        return PlainTextResponse(code_css, media_type="text/css")

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def forbidden(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)  # registered for HTTPException only
        return HTMLResponse(templates.get_template("error.html").render(
            request=request, user=None, roles=None, csrf="", flashes=[], refresh=None, oidc=False,
            message=exc.detail), status_code=exc.status_code)

    routes = [
        Route("/", home), Route("/login", login, methods=["GET", "POST"]), Route("/logout", logout, methods=["POST"]),
        Route("/oidc/login", oidc_login), Route("/oidc/callback", oidc_callback),
        Route("/approvals", approvals_page), Route("/sessions", sessions_page),
        Route("/sessions/new", new_session, methods=["GET", "POST"]),
        Route("/sessions/{session}", session_page), Route("/sessions/{session}/review", review_page),
        Route("/sessions/{session}/decide", decide, methods=["POST"]),
        Route("/sessions/{session}/ask", ask, methods=["GET", "POST"]),
        Route("/sessions/{session}/revoke", revoke, methods=["POST"]),
        Route("/grants", grants_page), Route("/batches", batches_page),
        Route("/batches/control", batch_control, methods=["POST"]), Route("/audit", audit_page),
        Route("/knowledge", knowledge_page), Route("/knowledge/causes/{cause_id:int}", cause_page),
        Route("/static/code.css", code_css_route), Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    # The cookie outlives the sign-in a little, so the console itself ends the sign-in (and says so); the
    # cookie's own expiry is the backstop.
    middleware = [Middleware(SessionMiddleware, secret_key=cookie_secret, session_cookie="bamboo_console",
                             max_age=settings.session_ttl_s + 600, same_site="lax",
                             https_only=settings.cookies_https_only())]
    return ConsoleApp(routes=routes, middleware=middleware, exception_handlers={HTTPException: forbidden})


def _claimed_identity(claim: str | None, value: object) -> tuple[str | None, str]:
    """The identity a single sign-on names, or None and the one-line reason it names none.

    The claim must already be an identity exactly as spelled. ``canonical_identity`` folds case and strips blanks,
    which is right for what a person types, but an issuer's ``sub`` is case-sensitive: its distinct subjects
    ``Alice``, ``ALICE`` and `` alice`` would all have signed in as the registered ``alice``."""
    if value is None or value == "":
        return None, (f"The sign-on gave no {claim} claim; ask the deployment to configure "
                      "BAMBOO_CONSOLE_OIDC_IDENTITY_CLAIM.")
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None, f"The sign-on's {claim} is not text, so it names no identity."
    text = str(value)
    try:
        identity = canonical_identity(text)
    except IdentityError as exc:
        return None, f"The sign-on's {claim} is not an identity: {exc}"
    if identity != text:
        return None, (f"The sign-on's {claim} {text[:80]!r} is not an identity as spelled (lower-case, nothing "
                      f"around it), and the console does not fold it into {identity!r}; ask the deployment for a "
                      "claim the issuer spells that way.")
    return identity, ""


def _local_path(target: str) -> str:
    """Only paths of this console may follow a sign-in or an action (no open redirect)."""
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else "/"


# A page number beyond this is read as page 1: a number that large is a typo or a probe, not a reader.
MAX_PAGE_NUMBER = 100_000


def _page_number(text: str) -> int:
    """The ``page`` parameter as a page number from 1; anything else (missing, not a number, out of range) is 1."""
    number = whole_number(text)
    return number if number is not None and 1 <= number <= MAX_PAGE_NUMBER else 1


def _as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
