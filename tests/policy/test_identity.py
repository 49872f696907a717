"""An identity is one spelling of one person: case and surrounding space fold, anything not plain ASCII is refused.

NFKC folding made look-alikes into the person they imitate: a single-sign-on account named with a Kelvin sign
(``Kate``), fullwidth letters, a ligature or ``ß`` signed into the console as ``kate``, ``alice``, ``fiona`` or
``strasse``."""

from __future__ import annotations

import pytest

from policy.identity import IdentityError, canonical_identity


@pytest.mark.parametrize("text, canonical", [(" Alice ", "alice"), ("BOB", "bob"), ("carol.d@cern.ch", "carol.d@cern.ch")])
def test_case_and_surrounding_space_fold_to_one_spelling(text, canonical):
    assert canonical_identity(text) == canonical


@pytest.mark.parametrize("look_alike", [
    "\u212aate",        # Kelvin sign, NFKC: K
    "\uff41lice",       # fullwidth a
    "\ufb01ona",        # the fi ligature
    "stra\u00dfe",      # sharp s, casefold: ss
    "\u0430lice",       # Cyrillic a
    "al\u200dice",      # a zero-width joiner inside
    "\u2168",           # Roman numeral nine, NFKC: IX
])
def test_a_look_alike_is_refused_not_folded_into_the_person_it_imitates(look_alike):
    with pytest.raises(IdentityError, match="ASCII"):
        canonical_identity(look_alike)


@pytest.mark.parametrize("spaced", ["alice\u00a0", "\u3000alice", "alice\u202f", "alice\u2028", "alice\x85", "alice\x1f",
                                    "\x1calice"])
def test_only_ascii_blanks_are_dropped_around_an_identity(spaced):
    """str.strip() drops no-break and ideographic spaces and the ASCII separators too: an identity provider's
    distinct account 'alice<NBSP>' signed into the console as alice."""
    with pytest.raises(IdentityError):
        canonical_identity(spaced)
