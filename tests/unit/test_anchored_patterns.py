"""A pattern that validates a whole value ends in ``\\Z``, not ``$``: ``$`` also matches before a final newline,
so "status_of\\n" passed as a plain tool name (its stub did not compile) and "CERN\\n" as a plain site name.
Structural, over the sources of the packages that validate what crosses a boundary."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHOLE_VALUE = re.compile(r"""re\.compile\(r?["']\^[^"']*\$["']""")


def test_whole_value_patterns_do_not_accept_a_trailing_newline() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("policy", "bamboo", "workflows", "activities", "worker")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), start=1) if WHOLE_VALUE.search(line)]
    assert found == [], f"anchor these with \\Z (or use fullmatch and drop the $): {found}"
