"""The Heddle rollout scenario: trajectories, baselines and Heddle run through one loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.algorithms.heddle.prediction import (
    ProgressivePredictor,
    PromptHistoryPredictor,
    StepRecord,
    TrajectoryRecord,
)
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.baselines import (
    OraclePredictor,
    fixed_mp,
    heddle,
    lower_bound_makespan,
    slime,
    verl,
    verl_star,
)
from workers.sim.llm.rollout import PlacementPolicy, Scenario, SystemConfig, run_rollout
from workers.sim.llm.trajectories import (
    GROUP_SIZE,
    PROFILES,
    generate_trajectories,
    read_jsonl,
    write_jsonl,
)


def test_generator_groups_determinism_and_jsonl_round_trip(tmp_path: Path) -> None:
    for profile in PROFILES:
        records = generate_trajectories(profile, prompts=3, seed=4)
        assert len(records) == 3 * GROUP_SIZE
        assert len({r.group_id for r in records}) == 3
        assert all(1 <= len(r.steps) <= PROFILES[profile].max_steps for r in records)
        assert all(r.total_tokens <= PROFILES[profile].max_total_tokens for r in records)
        assert records == generate_trajectories(profile, prompts=3, seed=4)
        other_epoch = generate_trajectories(profile, prompts=3, seed=4, epoch=1)
        assert [r.prompt_tokens for r in other_epoch] == [r.prompt_tokens for r in records]
        assert other_epoch != records
    path = tmp_path / "t.jsonl"
    write_jsonl(records, path)
    assert read_jsonl(path) == records


@pytest.fixture(scope="module")
def workload() -> tuple[list[TrajectoryRecord], ProgressivePredictor, list[int]]:
    train = generate_trajectories("coding", prompts=4, seed=9, epoch=0)
    evaluation = generate_trajectories("coding", prompts=4, seed=9, epoch=1)
    predictor = ProgressivePredictor(PromptHistoryPredictor().fit(train), max_iter=30).fit(train)
    return evaluation, predictor, [r.total_tokens for r in train]


SCENARIO = Scenario(gpu_budget=4, max_batch_per_gpu=8, max_trajectories_per_gpu=32)


@pytest.mark.parametrize(
    "system", [verl(), verl_star(), slime(), fixed_mp(1), fixed_mp(4), heddle()], ids=str
)
def test_every_system_finishes_every_trajectory(
    workload: tuple[list[TrajectoryRecord], ProgressivePredictor, list[int]],
    system: SystemConfig,
) -> None:
    records, predictor, history = workload
    result = run_rollout(records, system, SCENARIO, predictor, history)
    assert len(result.outcomes) == len(records)
    assert result.total_tokens == sum(r.total_tokens for r in records)
    assert sum(result.mp_degrees) == SCENARIO.gpu_budget
    assert result.makespan >= lower_bound_makespan(records, SCENARIO.latency) * 0.999
    assert result.active_over_time[0][1] == len(records)
    assert result.active_over_time[-1][1] == 0
    for record in records:
        outcome = result.outcomes[record.trajectory_id]
        assert len(outcome.worker_ids) == len(record.steps)
        tool = sum(s.tool_seconds for s in record.steps)
        assert outcome.finished_at >= tool
    if system.placement is PlacementPolicy.STATIC_AFFINITY:
        assert all(len(set(o.worker_ids)) == 1 for o in result.outcomes.values())


def test_pps_front_loads_the_longest_trajectory() -> None:
    """One worker, batch of one: under PPS (oracle) the longest trajectory never waits behind
    the others; under step round-robin it waits at every step."""
    long = TrajectoryRecord("L", "p", "g", 10, tuple(StepRecord(200, 0.1) for _ in range(5)))
    shorts = [
        TrajectoryRecord(f"s{i}", "p", "g", 10, (StepRecord(100, 0.1), StepRecord(100, 0.1)))
        for i in range(6)
    ]
    records = [*shorts, long]
    scenario = Scenario(gpu_budget=1, max_batch_per_gpu=1, max_trajectories_per_gpu=16)
    oracle = OraclePredictor(records)
    queueing = {}
    for policy in (PriorityPolicy.PPS, PriorityPolicy.ROUND_ROBIN):
        system = SystemConfig(policy.value, policy, PlacementPolicy.STATIC_AFFINITY, mp_degree=1)
        result = run_rollout(records, system, scenario, oracle)
        queueing[policy] = result.outcomes["L"].queueing_seconds
    assert queueing[PriorityPolicy.PPS] < 0.2 * queueing[PriorityPolicy.ROUND_ROBIN]


def test_heddle_migrates_during_tool_calls_and_beats_verl(
    workload: tuple[list[TrajectoryRecord], ProgressivePredictor, list[int]],
) -> None:
    records, predictor, history = workload
    scenario = Scenario(gpu_budget=4, max_batch_per_gpu=8, max_trajectories_per_gpu=32)
    ours = run_rollout(records, heddle(), scenario, predictor, history)
    theirs = run_rollout(records, verl(), scenario, predictor, history)
    assert ours.throughput > theirs.throughput
    assert ours.cache_hit_rate() > 0.5


def test_lower_bound_uses_the_fastest_mp() -> None:
    record = TrajectoryRecord("t", "p", "g", 0, (StepRecord(1000, 2.0, 0),))
    model = MPLatencyModel()
    assert lower_bound_makespan([record], model) == pytest.approx(1000 * model.tau(8) + 2.0)
