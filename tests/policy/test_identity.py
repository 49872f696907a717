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
