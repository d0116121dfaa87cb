from __future__ import annotations

from bench import heddle_placement


def test_placement_core_shape_and_sanity() -> None:
    series = heddle_placement.run_core(
        prompts=2, gpus=2, profiles=["math"], engines=["context", "legacy"]
    )
    for engine in ("context", "legacy"):
        results = series[engine]["math"]
        names = [heddle_placement.OURS, *heddle_placement.BASELINES]
        rows = [results[n] for n in [*names, f"{heddle_placement.OURS}_oracle"]]
        tokens = {r["throughput_tokens_per_s"] * r["makespan_s"] for r in rows}
        assert max(tokens) - min(tokens) < 1e-6 * max(tokens)  # same work for every system
        assert all(0.0 <= r["cache_hit_rate"] <= 1.0 for r in rows)
        best = results["best_baseline"]
        assert best in heddle_placement.BASELINES
        assert all(
            results[best]["throughput_tokens_per_s"] >= results[n]["throughput_tokens_per_s"]
            for n in heddle_placement.BASELINES
        )
        assert results[f"{heddle_placement.OURS}_over_best_baseline"] > 0


def test_placement_reports_the_remaining_key_beside_the_target() -> None:
    series = heddle_placement.run_core(prompts=2, gpus=2, profiles=["math"], engines=["context"])
    results = series["context"]["math"]
    suffix = heddle_placement.REMAINING
    best = results[f"best_baseline{suffix}"]
    assert best in {f"{n}{suffix}" for n in heddle_placement.BASELINES}
    ours = results[f"{heddle_placement.OURS}{suffix}"]["throughput_tokens_per_s"]
    assert results[f"{heddle_placement.OURS}{suffix}_over_best_baseline{suffix}"] == (
        ours / results[best]["throughput_tokens_per_s"]
    )
    assert {s.priority for s in heddle_placement.remaining_key_systems()} == {
        heddle_placement.PriorityPolicy.PPS_REMAINING
    }


def test_placement_reports_the_oracle_ceiling_and_the_paper_group_limit() -> None:
    series = heddle_placement.run_core(prompts=2, gpus=2, profiles=["math"], engines=["context"])
    results = series["context"]["math"]
    suffix = heddle_placement.REMAINING
    best = results[f"best_baseline{suffix}"]
    for name in (f"{heddle_placement.OURS}_oracle", heddle_placement.PAPER_LIMIT):
        assert results[f"{name}{suffix}_over_best_baseline{suffix}"] == (
            results[f"{name}{suffix}"]["throughput_tokens_per_s"]
            / results[best]["throughput_tokens_per_s"]
        )
    limited = results[heddle_placement.PAPER_LIMIT]["breakdown"]
    ours = results[heddle_placement.OURS]["breakdown"]
    # 32 trajectories on 2 workers: a group limit of 100 does not bind, the plan is the same
    assert limited["planner_group_cost_s"] == ours["planner_group_cost_s"]
    assert len(ours["planner_group_cost_s"]) == 2
    assert max(ours["planner_group_cost_s"]) == ours["planner_makespan_s"]
    row = results[heddle_placement.OURS]
    tokens = row["throughput_tokens_per_s"] * row["makespan_s"]
    assert abs(sum(ours["worker_output_tokens"]) - tokens) <= len(ours["worker_output_tokens"])
