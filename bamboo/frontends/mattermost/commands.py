"""What a Mattermost post asks for, in the commands docs/mattermost.md lists, parsed without side effects.

In a channel: ``investigate <task-id|symptom> [--verbose] [--no-hypothesis]`` (opens a thread per session),
``analyze <task-id>``, ``/approvals`` (what waits for review). In a session's thread: a review reply
(``y TAG`` run once, ``a TAG`` auto-run, ``k TAG`` always ask, with the tag the review post shows; ``e`` with a
replacement ```` ``` ```` block, ``N`` reject, the tag optional: they run nothing),
``/approvals``, ``/revoke <hash-prefix|proc-name|all>``, ``--verbose`` or ``verbose on|off`` (narration
for this thread only), and anything else is a message to the session, read by the parser every front end
shares (``bamboo.frontends.operator_lines``: ``/tool``, ``/new``, ``/codify``). Mattermost takes a leading
``/`` as a slash command, so each of these also works without it, or with ``!`` instead.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from bamboo.frontends.mattermost.review_tags import TAG_PATTERN
from bamboo.frontends.operator_lines import parse_line
from policy.decisions import DecisionKind

REVIEW_REPLIES: dict[str, DecisionKind] = {
    "y": DecisionKind.RUN_ONCE, "a": DecisionKind.AUTO_RUN, "k": DecisionKind.ALWAYS_ASK, "e": DecisionKind.EDIT,
    "n": DecisionKind.REJECT,
}
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n(.*?)\n?```", re.DOTALL)


class Command(BaseModel):
    kind: Literal["investigate", "analyze", "pending", "decision", "approvals", "revoke", "verbose", "message",
                  "help", "invalid"]
    task_id: int | None = None
    symptom: str | None = None
    verbose: bool = False
    hypothesis: bool = True
    decision: DecisionKind | None = None
    tag: str | None = None  # the review a decision answers (review_tags); needed to run code
    replacement_code: str | None = None
    target: str | None = None
    text: str = ""
    force_tool: bool = False
    fresh_code: bool = False
    codify: str | None = None
    error: str = ""


# ASCII digits only, and few enough that int() is cheap; whether the number is a task id PanDA can have is the
# task check's answer (bamboo.models.incident.task_problem), which names the number it refuses.
_TASK_ID = re.compile(r"[0-9]{1,40}")


def _task_id(word: str) -> int | None:
    """A number as people type a task id. ``str.isdigit`` also takes '²' and other Unicode digits that ``int``
    refuses, and a 5000-digit number made ``int`` raise."""
    return int(word) if _TASK_ID.fullmatch(word) else None


def _word(text: str) -> str:
    return text.lstrip("/!").lower()


def parse_root(message: str) -> Command | None:
    """A post in a channel (not in a thread); None when it is not addressed to the bot."""
    words = message.strip().split()
    if not words:
        return None
    head = _word(words[0])
    if head == "investigate":
        flags = {w for w in words[1:] if w.startswith("--")}
        rest = [w for w in words[1:] if not w.startswith("--")]
        unknown = flags - {"--verbose", "--no-hypothesis"}
        if unknown or not rest:
            return Command(kind="invalid", error="usage: investigate <task-id|symptom> [--verbose] [--no-hypothesis]")
        task = _task_id(rest[0]) if len(rest) == 1 else None
        return Command(kind="investigate", task_id=task, symptom=None if task else " ".join(rest),
                       verbose="--verbose" in flags, hypothesis="--no-hypothesis" not in flags)
    if head == "analyze":
        task = _task_id(words[1]) if len(words) == 2 else None
        if task is None:
            return Command(kind="invalid", error="usage: analyze <task-id> (a number)")
        return Command(kind="analyze", task_id=task)
    if head in ("approvals", "pending") and len(words) == 1:
        return Command(kind="pending")
    if head == "bamboo" and len(words) == 1:
        return Command(kind="help")
    return None


def parse_thread(message: str) -> Command:
    """A post in a session's thread."""
    text = message.strip()
    first, _, rest = text.partition("\n")
    words = first.split()
    head = _word(words[0]) if words else ""
    tag = words[1].lower() if len(words) == 2 and TAG_PATTERN.fullmatch(words[1].lower()) else None
    if head in REVIEW_REPLIES and (len(words) == 1 or tag):
        kind = REVIEW_REPLIES[head]
        if kind.runs_code and tag is None:
            return Command(kind="invalid", error=f"name the review you answer: `{head} TAG`, with the tag its post "
                                                 "shows (a review posted while you read another is then never the "
                                                 "one you approve)")
        if kind is DecisionKind.EDIT:
            block = _FENCE.search(rest)
            if block is None or not block.group(1).strip():
                return Command(kind="invalid", error="an edit is `e` followed by the replacement code in a ``` block")
            return Command(kind="decision", decision=kind, tag=tag, replacement_code=block.group(1))
        return Command(kind="decision", decision=kind, tag=tag)
    if head == "approvals" and len(words) == 1:
        return Command(kind="approvals")
    if head == "revoke" and (first.lstrip()[:1] in "/!" or len(words) == 2):
        if len(words) != 2:
            return Command(kind="invalid", error="usage: /revoke <hash-prefix|proc-name|all>")
        return Command(kind="revoke", target=words[1])
    if text in ("--verbose", "verbose on", "/verbose", "!verbose"):
        return Command(kind="verbose", verbose=True)
    if text in ("--quiet", "verbose off"):
        return Command(kind="verbose", verbose=False)
    line = parse_line(text, command_marks="/!")
    if line.kind == "message":
        return Command(kind="message", text=line.text, force_tool=line.force_tool, fresh_code=line.fresh_code,
                       codify=line.codify)
    if line.kind in ("finalize", "abandon", "quit"):
        return Command(kind="invalid", error=f"`{head}` is not offered in Mattermost; use the console or the CLI")
    if head in ("tool", "new"):
        return Command(kind="invalid", error=line.error)
    return Command(kind="message", text=text)
