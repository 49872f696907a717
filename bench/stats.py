"""The order statistics every benchmark reports, with one definition (nearest rank), so a p95 in one table
means what it means in the next."""

from __future__ import annotations

import math


def percentile(values: list[float], q: float) -> float:
    """The smallest value with at least a share `q` of the values at or below it (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def p50(values: list[float]) -> float:
    return percentile(values, 0.50)


def p95(values: list[float]) -> float:
    return percentile(values, 0.95)
