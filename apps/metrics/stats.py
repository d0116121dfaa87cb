"""Small statistics helpers shared by snapshots, page selectors and rollups (pure, no Django)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypedDict

import numpy as np


class ActStats(TypedDict):
    """ACT summary: p50 / p99 / mean in seconds and how many samples they come from."""

    p50: float | None
    p99: float | None
    mean: float | None
    n: int


def act_stats(durations_s: Sequence[float]) -> ActStats:
    """Percentiles and mean of completion times; all None when there are none."""
    if not durations_s:
        return {"p50": None, "p99": None, "mean": None, "n": 0}
    values = np.asarray(durations_s, dtype=float)
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50": float(p50), "p99": float(p99), "mean": float(values.mean()), "n": len(values)}


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """``end - start`` in seconds, or None when either is missing."""
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def ratio(used: float, total: float) -> float | None:
    """``used / total`` clipped to [0, 1]; None when there is no capacity to speak of."""
    if total <= 0:
        return None
    return max(0.0, min(1.0, used / total))


def histogram(values: Sequence[float], bins: int = 20) -> list[dict[str, float]]:
    """Equal-width histogram as ``[{"lo", "hi", "count"}]``; empty input gives no buckets.
    Whole-number values (steps, tokens) get whole-number buckets, ``lo``..``hi`` inclusive."""
    if not values:
        return []
    array = np.asarray(values, dtype=float)
    low, high = float(array.min()), float(array.max())
    if high <= low:
        return [{"lo": low, "hi": high, "count": len(values)}]
    if np.all(np.isfinite(array)) and np.all(array == np.floor(array)):
        return _integer_histogram(array, int(low), int(high), bins)
    counts, edges = np.histogram(array, bins=min(bins, max(1, len(values))), range=(low, high))
    return [
        {"lo": round(float(edges[i]), 3), "hi": round(float(edges[i + 1]), 3), "count": int(c)}
        for i, c in enumerate(counts)
    ]


def _integer_histogram(array: np.ndarray, low: int, high: int, bins: int) -> list[dict[str, float]]:
    """Buckets of a whole number of values each, the last one ending at ``high``."""
    width = -(-(high - low + 1) // bins)  # ceiling
    edges = np.arange(low, high + width + 1, width)
    edges = edges[: int(np.searchsorted(edges, high, side="right")) + 1]
    counts, _ = np.histogram(array, bins=edges)
    return [
        {"lo": int(edges[i]), "hi": min(int(edges[i + 1]) - 1, high), "count": int(c)}
        for i, c in enumerate(counts)
    ]
