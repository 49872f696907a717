"""Which review a Mattermost reply answers: the tag the bot's review post shows, which the reply repeats.

A bare `y` answered whichever review the bot had posted last before it, so a review posted while the approver
was reading the previous one was the one approved: whoever may edit the pending code (any requester) could
swap it for other code a second before the `y` arrived, and the thread's "typing…" indicator says when. The
console sends the hash its page showed and the CLI needs 32 hex characters of it; a chat reply cannot carry
either comfortably, so every review post shows a short tag and a reply that runs code names it (`y k3v7qa`).

The tag is keyed by the bot's private key (a hash of its signature over the session, turn, code hash and review
digest: the same code reviewed again with another verdict is another review, posted again with its own tag): it
cannot be computed from the code, so nobody can prepare other code whose review shows the same tag, as one
can grind two bodies whose hashes share a short prefix. It needs no storage: a restarted bot computes the tags
of the reviews it reads back from the thread.
"""

from __future__ import annotations

import base64
import hashlib
import re

from bamboo.approvals.keys import LocalKey

TAG_CHARS = 6  # 30 bits: each guess costs an edit and a post the thread shows
TAG_PATTERN = re.compile(rf"[a-z2-7]{{{TAG_CHARS}}}")
_DOMAIN = b"bamboo-mattermost-review-tag-v2\n"


def review_tag(key: LocalKey, session_id: str, turn: int, code_hash: str, review: str) -> str:
    """The tag of the review ``review`` (its digest) of ``code_hash`` at ``turn`` in ``session_id``, as the bot
    holding ``key`` shows it."""
    signed = key.sign(_DOMAIN + f"{session_id}\n{turn}\n{code_hash.lower()}\n{review.lower()}".encode())
    digest = hashlib.sha256(signed.encode("ascii")).digest()
    return base64.b32encode(digest).decode("ascii").lower()[:TAG_CHARS]
