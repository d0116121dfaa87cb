"""The dashboard's equal-width histograms (``apps.metrics.stats.histogram``)."""

from __future__ import annotations

import itertools
import random

from apps.metrics.stats import histogram


def test_whole_numbers_get_whole_number_buckets_ending_at_the_maximum() -> None:
    assert histogram([0, 1, 2, 3, 3, 3]) == [
        {"lo": 0, "hi": 0, "count": 1},
        {"lo": 1, "hi": 1, "count": 1},
        {"lo": 2, "hi": 2, "count": 1},
        {"lo": 3, "hi": 3, "count": 3},
    ]
    rng = random.Random(0)
    for _ in range(500):
        values = [
            rng.randint(-50, rng.choice([1, 5, 100, 10_000])) for _ in range(rng.randint(1, 200))
        ]
        buckets = histogram([float(v) for v in values])
        assert sum(b["count"] for b in buckets) == len(values) and len(buckets) <= 20
        assert (buckets[0]["lo"], buckets[-1]["hi"]) == (min(values), max(values))
        assert all(a["hi"] + 1 == b["lo"] for a, b in itertools.pairwise(buckets))


def test_fractions_keep_equal_width_buckets() -> None:
    buckets = histogram([0.5, 1.7])
    assert [(b["lo"], b["hi"], b["count"]) for b in buckets] == [(0.5, 1.1, 1), (1.1, 1.7, 1)]
    assert histogram([]) == [] and histogram([2.0, 2.0]) == [{"lo": 2.0, "hi": 2.0, "count": 2}]
