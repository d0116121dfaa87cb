"""The live DARTS bench's machinery on a tiny run: real llama.cpp workers and router processes,
the three configurations per step, paired seeds, ratios for every step."""

from __future__ import annotations

from bench import router_darts_live
from bench.router_darts_live import CONFIGURATIONS, Settings, measure_fleet


def test_a_tiny_run_measures_every_configuration_on_paired_seeds() -> None:
    settings = Settings(prompts=2, group_size=2, max_tokens=48, repeats=2, slots=2)
    series = measure_fleet(settings)
    for name in CONFIGURATIONS:
        runs = series["runs"][name]
        assert [r["step"] for r in runs] == [0, 1]
        for r in runs:
            assert r["seconds"] > 0 and 0 < r["first_kept_s"] <= r["seconds"]
            assert sum(fate == "kept" for row in r["candidates"] for _, fate in row) == 4
    assert all(r["total_budget"] == 4 for r in series["runs"]["standard"])
    assert all(4 <= r["total_budget"] <= 8 for r in series["runs"]["darts"])
    # the same seeds draw the same samples: standard's are DARTS's first M candidates
    assert series["ratios"]["paired_lengths_equal"] == [1.0, 1.0]
    assert all(len(v) == 2 and all(x > 0 for x in v) for v in series["ratios"].values())
    assert set(series["median_ratios"]) == set(series["ratios"])


def test_prompts_are_distinct_and_stable() -> None:
    texts = router_darts_live.prompt_texts(8)
    assert len(set(texts)) == 8 and texts == router_darts_live.prompt_texts(8)
