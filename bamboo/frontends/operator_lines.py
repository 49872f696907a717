"""What an operator types into a session, parsed the same way in every front end (the terminal, the console's
ask box, a Mattermost thread), without side effects.

A line is a message to the session unless it is one of the session commands: ``/tool TEXT`` (a tool turn, no
intent classification), ``/new TEXT`` (newly written code instead of a stored procedure that fits),
``/codify`` (list the resolved incidents' written procedures that fit this session) and ``/codify N`` or
``/codify NAME`` (turn that one into code under review), ``/approvals``, ``/revoke TARGET``, ``/finalize``,
``/abandon [REASON]``, ``/quit``. A front end may take ``!`` for ``/`` (Mattermost keeps ``/`` for its own
commands). Which of the commands a front end offers is its choice; what each one means is decided here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from bamboo.investigation.contract import OperatorMessage
from policy.identity import Identity

QUIT_WORDS = ("quit", "exit", "detach")
HELP = ("type a question or request (a stored procedure that fits is proposed first); /tool TEXT forces a tool turn; "
        "/new TEXT asks for newly written code instead of a stored procedure; /codify lists the written procedures "
        "of resolved incidents that fit, /codify N turns one into code; /approvals; "
        "/revoke <hash-prefix|proc-name|all>; /finalize; /abandon [reason]; /quit detaches (the session keeps running)")

LineKind = Literal["message", "approvals", "revoke", "finalize", "abandon", "quit", "invalid"]


class OperatorLine(BaseModel):
    """One parsed line. For a message, ``message_for`` builds the request; ``error`` says why a line is invalid."""

    kind: LineKind
    text: str = ""
    force_tool: bool = False
    fresh_code: bool = False
    codify: str | None = None
    target: str = ""
    reason: str = ""
    error: str = ""

    def message_for(self, author: Identity) -> OperatorMessage:
        """The request this line sends when it is a message (validated: a bound is refused here, not later)."""
        return OperatorMessage(text=self.text, author=author, force_tool=self.force_tool,
                               fresh_code=self.fresh_code, codify=self.codify)


def parse_line(line: str, *, command_marks: str = "/") -> OperatorLine:
    """``line`` as the operator meant it; ``command_marks`` are the characters that start a command."""
    text = line.strip()
    if not text:
        return OperatorLine(kind="invalid", error=HELP)
    if text[0] not in command_marks:
        return OperatorLine(kind="message", text=text)
    head, _, rest = text[1:].partition(" ")
    head, rest = head.lower(), rest.strip()
    if head in ("tool", "new"):
        if not rest:
            return OperatorLine(kind="invalid", error=f"usage: /{head} TEXT")
        return OperatorLine(kind="message", text=rest, force_tool=True, fresh_code=head == "new")
    if head == "codify":
        # The message's text is the line as typed: what the author signed is what the transcript shows.
        return OperatorLine(kind="message", text=text, codify=rest)
    if head == "approvals" and not rest:
        return OperatorLine(kind="approvals")
    if head == "revoke":
        if not rest or len(rest.split()) != 1:
            return OperatorLine(kind="invalid", error="usage: /revoke <hash-prefix|proc-name|all>")
        return OperatorLine(kind="revoke", target=rest)
    if head == "finalize" and not rest:
        return OperatorLine(kind="finalize")
    if head == "abandon":
        return OperatorLine(kind="abandon", reason=rest)
    if head in QUIT_WORDS and not rest:
        return OperatorLine(kind="quit")
    return OperatorLine(kind="invalid", error=HELP)
