"""Canonical operator identities: the one spelling under which a person is compared, registered and audited.

An identity was a free string compared byte for byte, so ``Alice`` could approve what ``alice`` asked for,
and look-alike letters from other scripts would have done the same. Every identity that enters a decision
is case-folded, stripped of surrounding space, and must be plain ASCII of a small alphabet, so two spellings of
one name become the same identity and a look-alike is refused rather than treated as a different person.

Non-ASCII text is refused before anything is folded, not normalised first: NFKC turned look-alikes into the
person they imitate (``Kate`` with a Kelvin sign, fullwidth ``ａlice``, the ``ﬁ`` ligature, ``ß``), so a
single-sign-on account spelled so signed into the console as someone else.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

MAX_IDENTITY_LENGTH = 64
_IDENTITY = re.compile(r"^[a-z0-9](?:[a-z0-9._@+-]{0,62}[a-z0-9])?\Z")


class IdentityError(ValueError):
    """The text cannot be an operator identity; the message says what is accepted."""


def canonical_identity(text: str) -> str:
    """The canonical form of ``text``, or IdentityError naming what an identity may contain."""
    if not isinstance(text, str):
        raise IdentityError("an identity must be text")
    if len(text) > 4 * MAX_IDENTITY_LENGTH:
        raise IdentityError(f"an identity is at most {MAX_IDENTITY_LENGTH} characters")
    # Only ASCII blanks a person or a file adds are dropped: str.strip() also drops no-break and ideographic
    # spaces and the separators U+001C-U+001F, so an identity provider's distinct 'alice<NBSP>' became alice.
    stripped = text.strip(" \t\r\n")
    folded = stripped.lower() if stripped.isascii() else ""  # str.lower() alone maps the Kelvin sign to k
    if not _IDENTITY.match(folded):
        raise IdentityError(
            f"{text[:MAX_IDENTITY_LENGTH]!r} is not a valid identity: use 1-{MAX_IDENTITY_LENGTH} ASCII letters, digits "
            "and . _ @ + - (starting and ending with a letter or digit); letter case does not matter"
        )
    return folded


def _coerce(value: object) -> object:
    return canonical_identity(value) if isinstance(value, str) else value


# A pydantic field type: ``approver: Identity`` stores the canonical form or fails validation.
Identity = Annotated[str, BeforeValidator(_coerce), AfterValidator(canonical_identity)]
