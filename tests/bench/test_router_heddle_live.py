"""router_heddle_live: the quick mode end to end (report shape, every trajectory completed under
every policy), and its pieces (the simulator's round-robin and cache-less workers, the history
the router learns from, the engine's slip). No performance asserts: the benchmark reports them."""

from __future__ import annotations

from bench import router_heddle_live
from bench._router_live_sim import POLICIES, simulate
from workers.sim.llm.experiments import prepare_workload
from workers.sim.llm.rollout import Scenario


def test_quick_mode_runs_every_policy_to_completion() -> None:
    report = router_heddle_live.run(quick=True)
    body = report.to_json()
    assert body["benchmark"] == "router_heddle_live" and body["quick"] is True
    trajectories = body["params"]["trajectories"]
    assert trajectories == router_heddle_live.QUICK.prompts * router_heddle_live.GROUP
    repeats = body["series"]["live"]["repeats"]
    assert len(repeats) == router_heddle_live.QUICK.repeats
    for repeat in repeats:
        assert set(repeat["runs"]) == set(POLICIES)
        for row in repeat["runs"].values():
            assert row["errors"] == []
            assert row["completed"] == row["trajectories"] == trajectories
            assert row["tokens"] == body["params"]["output_tokens"]
            assert sum(row["requests_per_worker"]) == body["params"]["steps"]
            assert len(row["engine_slip"]) == router_heddle_live.WORKERS
    names = {"heddle_over_round_robin", "heddle_over_least_load"}
    assert set(body["series"]["live"]["median_ratios"]) == names
    assert set(body["series"]["simulated"]["predicted_ratios"]) == names
    targets = {t["name"]: t for t in body["targets"]}
    assert set(targets) == {f"prediction_error_{n}" for n in names} | {"all_trajectories_completed"}
    assert targets["all_trajectories_completed"]["met"]
    for key in ("engine_slip_max", "router_cpu_share_max", "client_loop_probe_late_p99_ms_max"):
        assert key in body["series"]["validity"]


def test_simulated_round_robin_spreads_steps_and_no_cache_keeps_nothing() -> None:
    workload = prepare_workload("coding", prompts=1)
    records = workload.evaluation
    scenario = Scenario(gpu_budget=4, max_batch_per_gpu=4, max_trajectories_per_gpu=8)
    history = workload.planner_history
    bare = simulate(records, scenario, workload.prompt_history, history, prefix_cache=False)
    cached = simulate(records, scenario, workload.prompt_history, history, prefix_cache=True)
    steps = sum(len(r.steps) for r in records)
    per_worker = [0] * 4
    for outcome in bare["round_robin"].outcomes.values():
        for worker in outcome.worker_ids:
            per_worker[worker] += 1
    assert sum(per_worker) == steps
    assert max(per_worker) - min(per_worker) <= 1  # the next worker in turn, every step
    for policy in POLICIES:
        assert bare[policy].cached_tokens == 0
        assert bare[policy].total_tokens == cached[policy].total_tokens
    # every step re-prefills its whole context without the cache
    assert bare["least_load"].prefill_tokens > cached["least_load"].prefill_tokens


def test_history_is_rescaled_to_the_routers_clock() -> None:
    records = prepare_workload("coding", prompts=1).history
    scaled = router_heddle_live.scaled_history(records, 0.5)
    for before, after in zip(records, scaled, strict=True):
        assert after.total_tokens == before.total_tokens
        assert after.prompt_id == before.prompt_id
        for old, new in zip(before.steps, after.steps, strict=True):
            assert new.tool_seconds == old.tool_seconds * 0.5
            assert new.tool_output_tokens == old.tool_output_tokens


def test_engine_slip_is_wall_over_scaled_model_busy_time() -> None:
    before = [{"model_busy_s": 10.0, "busy_wall_s": 1.0, "time_scale": 0.1}] * 2
    after = [
        {"model_busy_s": 20.0, "busy_wall_s": 2.0, "time_scale": 0.1},
        {"model_busy_s": 20.0, "busy_wall_s": 2.5, "time_scale": 0.1},
    ]
    slips = router_heddle_live._engine_slip(before, after)
    assert abs(slips[0]) < 1e-9
    assert abs(slips[1] - 0.5) < 1e-9
