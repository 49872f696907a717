"""The bot's side of Mattermost, on the maintained client ``mattermostdriver``, unchanged.

The driver's REST calls are synchronous (requests), so they run in a thread; its websocket class runs in
the bot's event loop and hands every event to the bot. Long posts are split at line boundaries below
Mattermost's limit, closing and reopening a code fence that a split falls inside; a line longer than a post
is cut where no escape or entity is split, and its rest keeps its quote (or starts after a marker).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mattermostdriver import Driver
from mattermostdriver.websocket import Websocket

MAX_POST_CHARS = 15000
# Room kept at a cut for the prefix the rest of the line starts with (continuation).
CONTINUATION_ROOM = 2


def split_message(message: str, limit: int = MAX_POST_CHARS) -> list[str]:
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    fence: str | None = None
    for line in message.split("\n"):
        if size + len(line) + 1 > limit and current:
            if fence:
                current.append("```")
            chunks.append("\n".join(current))
            current, size = ([fence] if fence else []), len(fence or "")
        while len(line) > limit:  # one enormous line: cut it (numbered code never gets here; it is pre-wrapped)
            cut = safe_cut(line, limit)
            current.append(line[:cut])
            chunks.append("\n".join(current))
            current, size, line = [], 0, continuation(line) + line[cut:]
        current.append(line)
        size += len(line) + 1
        if line.startswith("```"):
            fence = None if fence else line
    if current:
        chunks.append("\n".join(current))
    return chunks


def safe_cut(line: str, limit: int) -> int:
    """Where to cut a line longer than ``limit``: not between a backslash and the character it escapes, nor
    inside an entity (either left a live metacharacter at the start of the next post: a quoted summary's
    "\\#" became a heading there)."""
    cut = limit - CONTINUATION_ROOM
    while cut > 1 and line[cut - 1] == "\\":
        cut -= 1
    entity = line.rfind("&", max(cut - 12, 0), cut)
    if entity > 0 and ";" not in line[entity:cut]:
        cut = entity
    return cut


def continuation(line: str) -> str:
    """The prefix of a cut line's rest: a quote stays a quote (the model's words stay under their label), any
    other line goes on after a marker, so the rest never starts a heading, a list or a code block."""
    return "> " if line.startswith(">") else "↪ "


class MattermostChat:
    def __init__(self, options: dict[str, Any]) -> None:
        self.driver = Driver(options)
        self.me: dict[str, Any] = {}

    async def login(self) -> dict[str, Any]:
        self.me = await asyncio.to_thread(self.driver.login)
        return self.me

    async def post(self, channel_id: str, message: str, root_id: str = "") -> dict[str, Any]:
        """Post ``message`` (split if long); the first post's record."""
        first: dict[str, Any] | None = None
        for chunk in split_message(message):
            created = await asyncio.to_thread(self.driver.posts.create_post, {
                "channel_id": channel_id, "message": chunk, "root_id": root_id})
            first = first or created
        return first or {}

    async def post_parts(self, channel_id: str, parts: list[str], root_id: str = "") -> list[dict[str, Any]]:
        """Post each of ``parts`` (each within the limit, as ``split_message`` makes them) as it is; their records."""
        return [await asyncio.to_thread(self.driver.posts.create_post, {
            "channel_id": channel_id, "message": part, "root_id": root_id}) for part in parts]

    async def get_post(self, post_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.driver.posts.get_post, post_id)

    async def thread_posts(self, root_id: str) -> list[dict[str, Any]]:
        """Every post of the thread rooted at ``root_id``, oldest first (``GET /posts/{id}/thread``)."""
        found = await asyncio.to_thread(self.driver.posts.get_thread, root_id)
        posts = found.get("posts") or {}
        return sorted((posts[i] for i in found.get("order") or [] if i in posts), key=lambda p: p.get("create_at", 0))

    async def listen(self, handler: Callable[[str], Awaitable[None]]) -> None:
        """Receive websocket events until the connection ends (the driver reconnects while keepalive is on)."""
        await Websocket(self.driver.options, self.driver.client.token).connect(handler)
