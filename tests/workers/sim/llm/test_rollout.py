"""The Heddle rollout scenario: trajectories, baselines and Heddle run through one loop."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.algorithms.heddle.prediction import (
    ProgressivePredictor,
    PromptHistoryPredictor,
    StepRecord,
    TrajectoryContext,
    TrajectoryRecord,
)
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.baselines import (
    OraclePredictor,
    context_lower_bound_makespan,
    fixed_mp,
    heddle,
    lower_bound_makespan,
    slime,
    verl,
    verl_star,
)
from workers.sim.llm.rollout import (
    PlacementPolicy,
    RolloutSimulation,
    Scenario,
    SystemConfig,
    WorkloadHistory,
    run_rollout,
)
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


Workload = tuple[list[TrajectoryRecord], ProgressivePredictor, WorkloadHistory]


@pytest.fixture(scope="module")
def workload() -> Workload:
    train = generate_trajectories("coding", prompts=4, seed=9, epoch=0)
    evaluation = generate_trajectories("coding", prompts=4, seed=9, epoch=1)
    predictor = ProgressivePredictor(PromptHistoryPredictor().fit(train), max_iter=30).fit(train)
    return evaluation, predictor, WorkloadHistory.of(train)


SCENARIOS = {
    engine: Scenario(gpu_budget=4, max_batch_per_gpu=8, max_trajectories_per_gpu=32, engine=engine)
    for engine in ("context", "legacy")
}
SYSTEMS = [verl(), verl_star(2), slime(), fixed_mp(1), fixed_mp(4), heddle()]


@pytest.mark.parametrize("engine", list(SCENARIOS))
@pytest.mark.parametrize("system", SYSTEMS, ids=lambda s: f"{s.name}-{s.mp_degree}")
def test_every_system_finishes_every_trajectory(
    workload: Workload, system: SystemConfig, engine: str
) -> None:
    records, predictor, history = workload
    scenario = SCENARIOS[engine]
    result = run_rollout(records, system, scenario, predictor, history)
    assert len(result.outcomes) == len(records)
    assert result.total_tokens == sum(r.total_tokens for r in records)
    assert sum(result.mp_degrees) == scenario.gpu_budget
    bound = (
        lower_bound_makespan(records, scenario.latency)
        if engine == "legacy"
        else context_lower_bound_makespan(records, scenario.context)
    )
    assert result.makespan >= bound * 0.999
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
    oracle = OraclePredictor(records)
    for engine in ("context", "legacy"):
        scenario = Scenario(
            gpu_budget=1, max_batch_per_gpu=1, max_trajectories_per_gpu=16, engine=engine
        )
        queueing = {}
        for policy in (PriorityPolicy.PPS, PriorityPolicy.ROUND_ROBIN):
            system = SystemConfig(
                policy.value, policy, PlacementPolicy.STATIC_AFFINITY, mp_degree=1
            )
            result = run_rollout(records, system, scenario, oracle)
            queueing[policy] = result.outcomes["L"].queueing_seconds
        assert queueing[PriorityPolicy.PPS] < 0.2 * queueing[PriorityPolicy.ROUND_ROBIN]


def test_pps_remaining_lets_a_fresh_trajectory_keep_its_slot_from_one_nearly_done() -> None:
    """One slot. L (2 100 tokens) runs first under both keys; while it is in its tool call M
    (1 000 tokens, none done) takes the slot. L returns with 100 tokens left: by predicted total
    it outranks M and preempts it, by predicted remaining it waits for M."""
    records = [
        TrajectoryRecord("L", "p", "g", 10, (StepRecord(2000, 0.5), StepRecord(100))),
        TrajectoryRecord("M", "p", "g", 10, (StepRecord(1000),)),
    ]
    scenario = Scenario(gpu_budget=1, max_batch_per_gpu=1, max_trajectories_per_gpu=4)
    preempted = {}
    for policy in (PriorityPolicy.PPS, PriorityPolicy.PPS_REMAINING):
        system = SystemConfig(policy.value, policy, PlacementPolicy.STATIC_AFFINITY, mp_degree=1)
        result = run_rollout(records, system, scenario, OraclePredictor(records))
        assert result.outcomes["L"].timeline[0].queueing_seconds == 0.0
        preempted[policy] = result.outcomes["M"].timeline[0].preemptions
    assert preempted == {PriorityPolicy.PPS: 1, PriorityPolicy.PPS_REMAINING: 0}


class _StepwisePredictor:
    """Remaining tokens by trajectory and steps done (a scripted progressive predictor)."""

    def __init__(self, remaining: dict[str, tuple[float, float]]) -> None:
        self.remaining = remaining

    def predict(self, context: TrajectoryContext) -> float:
        before, after = self.remaining[str(context.trajectory_id)]
        return before if context.steps_done == 0 else after

    def predict_many(self, contexts: Sequence[TrajectoryContext]) -> np.ndarray:
        return np.asarray([self.predict(c) for c in contexts], dtype=float)


def test_a_prediction_landing_after_a_short_tool_call_rekeys_the_submitted_step() -> None:
    """L's tool call (0.01 s) ends before its refreshed prediction (0.1 s batching): the step is
    submitted with the stale, low priority. When the prediction lands, the running step is
    re-keyed above s0's, so s0 returning from its tool call no longer preempts it."""
    records = [
        TrajectoryRecord("s0", "p", "g", 10, (StepRecord(5, 2.0), StepRecord(500))),
        TrajectoryRecord("L", "p", "g", 10, (StepRecord(10, 0.01), StepRecord(1000))),
    ]
    predictor = _StepwisePredictor({"s0": (995.0, 495.0), "L": (50.0, 1000.0)})
    scenario = Scenario(gpu_budget=1, max_batch_per_gpu=1, max_trajectories_per_gpu=4)
    preemptions = {}
    for rekey in (True, False):
        system = SystemConfig(
            "pps",
            PriorityPolicy.PPS,
            PlacementPolicy.STATIC_AFFINITY,
            mp_degree=1,
            reprioritize_submitted=rekey,
        )
        result = run_rollout(records, system, scenario, predictor)
        preemptions[rekey] = result.outcomes["L"].timeline[1].preemptions
    assert preemptions == {True: 0, False: 1}


def test_heddle_migrates_during_tool_calls_and_keeps_its_caches(workload: Workload) -> None:
    records, predictor, history = workload
    result = run_rollout(records, heddle(mp_degree=1), SCENARIOS["context"], predictor, history)
    assert result.migrations > 0
    assert result.cache_hit_rate() > 0.5
    moved = [o for o in result.outcomes.values() if len(set(o.worker_ids)) > 1]
    assert moved and all(o.migration_wait_seconds >= 0 for o in moved)


def test_sglang_router_systems_report_their_decisions(workload: Workload) -> None:
    records, predictor, history = workload
    result = run_rollout(records, slime(), SCENARIOS["context"], predictor, history)
    decisions = result.router_decisions
    assert sum(decisions.values()) == sum(len(r.steps) for r in records)
    assert decisions["cache_hit"] > 0


def test_lower_bound_uses_the_fastest_mp() -> None:
    record = TrajectoryRecord("t", "p", "g", 0, (StepRecord(1000, 2.0, 0), StepRecord(500, 3.0, 0)))
    model = MPLatencyModel()
    # the tool call between the steps counts, none runs after the last one
    assert lower_bound_makespan([record], model) == pytest.approx(1500 * model.tau(8) + 2.0)


def _within_group_correlation(version: int) -> float:
    """Mean correlation, within each prompt's group, of the first step's length with the number
    of steps the sample goes on to take (the latent the generator draws per sample)."""
    records = generate_trajectories("coding", prompts=60, seed=3, version=version)
    groups: dict[str, list[TrajectoryRecord]] = {}
    for record in records:
        groups.setdefault(record.group_id, []).append(record)
    values = []
    for members in groups.values():
        first = np.asarray([m.steps[0].output_tokens for m in members], dtype=float)
        steps = np.asarray([len(m.steps) for m in members], dtype=float)
        if first.std() > 0 and steps.std() > 0:
            values.append(np.corrcoef(first, steps)[0, 1])
    return float(np.mean(values))


def test_generator_v2_does_not_leak_the_latent_through_the_first_step() -> None:
    assert _within_group_correlation(1) > 0.3
    assert abs(_within_group_correlation(2)) < 0.1


def test_a_per_worker_batch_caps_every_worker_alike_whatever_its_mp(workload: Workload) -> None:
    """heddle §7.1's fixed batch per rollout worker: an MP-4 worker runs no more requests at
    once than an MP-1 one (the per-GPU cap would give it four times as many)."""
    evaluation, predictor, history = workload
    scenario = Scenario(gpu_budget=4, max_batch_per_worker=5, max_trajectories_per_gpu=32)
    for system in (fixed_mp(1), fixed_mp(4), heddle()):
        simulation = RolloutSimulation(evaluation, system, scenario, predictor, history)
        result = simulation.run()
        assert {worker.max_batch for worker in simulation.workers} == {5}
        assert len(result.outcomes) == len(evaluation)
    assert Scenario(max_batch_per_gpu=8).max_batch(4) == 32
    assert Scenario(max_batch_per_gpu=8, max_batch_per_worker=5).max_batch(4) == 5
