"""A stand-in for a Mattermost server, faithful to the parts of API v4 and its websocket the bot uses.

No Mattermost server runs here, so the bot's unchanged production client (``mattermostdriver``) talks to
this one on loopback. What it keeps from Mattermost: personal access tokens as ``Authorization: Bearer``,
``GET /users/me`` and ``/users/{id}``, ``POST /posts`` (only members of a channel may post in it; a reply's
``root_id`` must be a post of the same channel), ``GET /posts/{id}`` and ``/posts/{id}/thread``,
``PUT /posts/{id}/patch`` (its author, or a system admin, who holds ``edit_others_posts``: a new message, with
``edit_at`` set to now; ``update_at`` set; a ``post_edited`` event) and ``DELETE /posts/{id}`` (its author or a system
admin: ``delete_at`` set, and the post no longer returned by either GET; a ``post_deleted`` event), errors as
``{"id", "message", "detailed_error", "request_id", "status_code"}`` with ``application/json``; and on
``/api/v4/websocket`` the ``authentication_challenge`` (answered ``{"status": "OK", "seq_reply": 1}``), the
``hello`` event with ``seq`` 0, and a ``posted`` event per new post to every member of its channel, with
the post as a JSON string in ``data.post`` and ``broadcast.channel_id``, numbered per connection.
Ids are 26 lowercase letters and digits, times are milliseconds since the epoch.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import string
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from bamboo.devstack.ports import free_port

SERVER_VERSION = "9.11.0.9.11.0.0.standin"


def new_id() -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(26))


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class User:
    id: str
    username: str
    token: str
    admin: bool = False  # a system admin: may edit and delete others' posts

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "username": self.username, "email": f"{self.username}@example.org", "nickname": "",
                "first_name": "", "last_name": "", "roles": "system_user system_admin" if self.admin else "system_user",
                "locale": "en", "create_at": 0,
                "update_at": 0, "delete_at": 0, "is_bot": False}


@dataclass
class Channel:
    id: str
    name: str
    team_id: str
    members: set[str] = field(default_factory=set)

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "display_name": self.name, "team_id": self.team_id, "type": "O",
                "create_at": 0, "update_at": 0, "delete_at": 0, "header": "", "purpose": ""}


class MattermostStandIn:
    def __init__(self) -> None:
        self.team_id = new_id()
        self.users: dict[str, User] = {}
        self.channels: dict[str, Channel] = {}
        self.posts: dict[str, dict[str, Any]] = {}
        self._sockets: list[tuple[str, WebSocket, list[int]]] = []
        self._lock = threading.Lock()
        self.port = free_port()
        app = Starlette(routes=[
            Route("/api/v4/users/me", self._me), Route("/api/v4/users/{user_id}", self._user),
            Route("/api/v4/posts", self._create_post, methods=["POST"]),
            Route("/api/v4/posts/{post_id}", self._get_post, methods=["GET"]),
            Route("/api/v4/posts/{post_id}", self._delete_post, methods=["DELETE"]),
            Route("/api/v4/posts/{post_id}/patch", self._patch_post, methods=["PUT"]),
            Route("/api/v4/posts/{post_id}/thread", self._thread),
            Route("/api/v4/channels/{channel_id}", self._channel),
            WebSocketRoute("/api/v4/websocket", self._websocket),
        ])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                     lifespan="off", ws="websockets-sansio"))
        self._thread = threading.Thread(target=self._server.run, name="mattermost-standin", daemon=True)

    # ------------------------------------------------------------------ setup, used by tests
    def add_user(self, username: str, *, admin: bool = False) -> User:
        user = User(id=new_id(), username=username, token=secrets.token_hex(13), admin=admin)
        self.users[user.id] = user
        return user

    def add_channel(self, name: str, *members: User) -> Channel:
        channel = Channel(id=new_id(), name=name, team_id=self.team_id, members={m.id for m in members})
        self.channels[channel.id] = channel
        return channel

    def thread(self, root_id: str) -> list[dict[str, Any]]:
        """The root post and its replies, oldest first."""
        with self._lock:
            found = [p for p in self.posts.values()
                     if (p["id"] == root_id or p["root_id"] == root_id) and not p["delete_at"]]
        return sorted(found, key=lambda p: (p["create_at"], p["id"]))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "MattermostStandIn":
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the Mattermost stand-in did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    # ------------------------------------------------------------------ REST
    def _error(self, status: int, error_id: str, message: str) -> JSONResponse:
        return JSONResponse({"id": error_id, "message": message, "detailed_error": "", "request_id": new_id(),
                             "status_code": status}, status_code=status)

    def _caller(self, request: Request) -> User | None:
        header = request.headers.get("authorization", "")
        token = header.removeprefix("Bearer ").removeprefix("BEARER ").strip()
        return next((u for u in self.users.values() if u.token == token), None) if token else None

    async def _me(self, request: Request) -> JSONResponse:
        user = self._caller(request)
        if user is None:
            return self._error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        return JSONResponse(user.json())

    async def _user(self, request: Request) -> JSONResponse:
        if self._caller(request) is None:
            return self._error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        user = self.users.get(request.path_params["user_id"])
        if user is None:
            return self._error(404, "app.user.missing_account.const", "Unable to find the user.")
        return JSONResponse(user.json())

    async def _channel(self, request: Request) -> JSONResponse:
        caller = self._caller(request)
        if caller is None:
            return self._error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        channel = self.channels.get(request.path_params["channel_id"])
        if channel is None or caller.id not in channel.members:
            return self._error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        return JSONResponse(channel.json())

    async def _create_post(self, request: Request) -> JSONResponse:
        caller = self._caller(request)
        if caller is None:
            return self._error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        body = await request.json()
        channel = self.channels.get(body.get("channel_id", ""))
        if channel is None or caller.id not in channel.members:
            return self._error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        root_id = body.get("root_id") or ""
        if root_id:
            root = self.posts.get(root_id)
            if root is None or root["channel_id"] != channel.id:
                return self._error(400, "api.post.create_post.root_id.app_error", "Invalid RootId parameter.")
            root_id = root["root_id"] or root["id"]
        message = body.get("message", "")
        if len(message) > 16383:
            return self._error(400, "model.post.is_valid.message_length.app_error", "Message is too long.")
        at = now_ms()
        post = {"id": new_id(), "create_at": at, "update_at": at, "edit_at": 0, "delete_at": 0, "is_pinned": False,
                "user_id": caller.id, "channel_id": channel.id, "root_id": root_id, "original_id": "",
                "message": message, "type": "", "props": body.get("props") or {}, "hashtags": "",
                "pending_post_id": body.get("pending_post_id", ""), "reply_count": 0, "metadata": {}}
        with self._lock:
            self.posts[post["id"]] = post
        await self._broadcast(channel, "posted", {
            "channel_display_name": channel.name, "channel_name": channel.name, "channel_type": "O",
            "post": json.dumps(post), "sender_name": f"@{caller.username}", "set_online": True,
            "team_id": channel.team_id})
        return JSONResponse(post, status_code=201)

    async def _get_post(self, request: Request) -> JSONResponse:
        caller = self._caller(request)
        post = self.posts.get(request.path_params["post_id"])
        if caller is None:
            return self._error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        if post is None or post["delete_at"] or caller.id not in self.channels[post["channel_id"]].members:
            return self._error(404, "app.post.get.app_error", "Unable to get the post.")
        return JSONResponse(post)

    def _changeable(self, request: Request) -> tuple[User, dict[str, Any]] | JSONResponse:
        """The caller and the post, when the caller may change it (its author, or a system admin)."""
        caller = self._caller(request)
        if caller is None:
            return self._error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        post = self.posts.get(request.path_params["post_id"])
        if post is None or post["delete_at"] or caller.id not in self.channels[post["channel_id"]].members:
            return self._error(404, "app.post.get.app_error", "Unable to get the post.")
        if post["user_id"] != caller.id and not caller.admin:
            return self._error(403, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
        return caller, post

    async def _patch_post(self, request: Request) -> JSONResponse:
        found = self._changeable(request)
        if isinstance(found, JSONResponse):
            return found
        _, post = found
        body = await request.json()
        at = now_ms()
        with self._lock:
            if "message" in body and body["message"] != post["message"]:  # as Mattermost's UpdatePost: only a new
                post["message"] = body["message"]                          # message marks the post edited
                post["edit_at"] = at
            post["update_at"] = at
        channel = self.channels[post["channel_id"]]
        await self._broadcast(channel, "post_edited", {"post": json.dumps(post)})
        return JSONResponse(post)

    async def _delete_post(self, request: Request) -> JSONResponse:
        found = self._changeable(request)
        if isinstance(found, JSONResponse):
            return found
        _, post = found
        with self._lock:
            post["delete_at"] = post["update_at"] = now_ms()
        channel = self.channels[post["channel_id"]]
        await self._broadcast(channel, "post_deleted", {"post": json.dumps(post), "delete_by": ""})
        return JSONResponse({"status": "OK"})

    async def _thread(self, request: Request) -> JSONResponse:
        caller = self._caller(request)
        root = self.posts.get(request.path_params["post_id"])
        if caller is None:
            return self._error(401, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
        if root is None or caller.id not in self.channels[root["channel_id"]].members:
            return self._error(404, "app.post.get.app_error", "Unable to get the post.")
        posts = self.thread(root["root_id"] or root["id"])
        return JSONResponse({"order": [p["id"] for p in posts], "posts": {p["id"]: p for p in posts},
                             "next_post_id": "", "prev_post_id": ""})

    # ------------------------------------------------------------------ websocket
    async def _websocket(self, ws: WebSocket) -> None:
        await ws.accept()
        try:
            challenge = json.loads(await ws.receive_text())
        except (WebSocketDisconnect, ValueError):
            return
        user = next((u for u in self.users.values() if u.token == (challenge.get("data") or {}).get("token")), None)
        if challenge.get("action") != "authentication_challenge" or user is None:
            await ws.send_text(json.dumps({"status": "FAIL", "seq_reply": challenge.get("seq", 0), "error": {
                "id": "api.web_socket_router.not_authenticated.app_error", "message": "Not authenticated."}}))
            await ws.close()
            return
        await ws.send_text(json.dumps({"status": "OK", "seq_reply": challenge.get("seq", 1)}))
        counter = [0]
        await ws.send_text(json.dumps({"event": "hello", "data": {"server_version": SERVER_VERSION},
                                       "broadcast": {"omit_users": None, "user_id": user.id, "channel_id": "",
                                                     "team_id": ""}, "seq": 0}))
        entry = (user.id, ws, counter)
        self._sockets.append(entry)
        try:
            while True:
                await ws.receive_text()  # clients may send actions (typing, ping); nothing else is needed here
        except WebSocketDisconnect:
            pass
        finally:
            self._sockets.remove(entry)

    async def _broadcast(self, channel: Channel, event: str, data: dict[str, Any]) -> None:
        for user_id, ws, counter in list(self._sockets):
            if user_id not in channel.members:
                continue
            counter[0] += 1
            message = {"event": event, "data": data, "broadcast": {"omit_users": None, "user_id": "",
                                                                   "channel_id": channel.id, "team_id": ""},
                       "seq": counter[0]}
            try:
                await ws.send_text(json.dumps(message))
            except Exception:  # noqa: BLE001 — a closing socket misses the event, as in Mattermost
                continue


async def wait_for_post(standin: MattermostStandIn, root_id: str, needle: str, *, by: str | None = None,
                        after: int = 0, timeout: float = 90.0) -> dict[str, Any]:
    """The first post in the thread (after index ``after``) that contains ``needle``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for post in standin.thread(root_id)[after:]:
            if needle in post["message"] and (by is None or post["user_id"] == by):
                return post
        await asyncio.sleep(0.2)
    shown = "\n---\n".join(p["message"][:400] for p in standin.thread(root_id))
    raise AssertionError(f"no post with {needle!r} in thread {root_id} within {timeout} s; the thread:\n{shown}")
