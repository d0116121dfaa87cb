"""Routing policies: Heddle's PPS priority and DP placement (from workers.algorithms.heddle),
the round-robin and least-load baselines."""

from __future__ import annotations

from workers.algorithms.heddle.migration import migration_target
from workers.algorithms.heddle.parallelism import worker_cost
from workers.algorithms.heddle.placement import homogeneous_workers, place_trajectories
from workers.router.policies import HeddlePolicy, LeastLoadPolicy, RoundRobinPolicy
from workers.router.pool import InFlight, LLMWorker
from workers.router.trajectories import TrajectoryState
from workers.router.upstream import Upstream


def workers(count: int) -> list[LLMWorker]:
    return [
        LLMWorker(f"w{i}", f"http://127.0.0.1:{9000 + i}", Upstream(f"http://127.0.0.1:{9000 + i}"))
        for i in range(count)
    ]


def trajectory(name: str, predicted: float, tokens: int = 0) -> TrajectoryState:
    state = TrajectoryState(name, "7", name, "", created_at=0.0, tokens=tokens)
    state.predicted_remaining = predicted
    return state


def test_pps_priority_is_the_predicted_total_length() -> None:
    policy = HeddlePolicy()
    assert policy.priority(trajectory("a", 900.0, tokens=100)) == 1000
    assert policy.priority(trajectory("b", 10.0)) < policy.priority(trajectory("c", 5000.0))


def test_heddle_routes_by_rank_through_the_dp_partition() -> None:
    fleet = workers(3)
    policy = HeddlePolicy(batch_limit=8, replan_s=3600)
    lengths = [8000, 6000, 500, 400, 300, 200, 150, 120, 100, 90, 80, 70]
    states = [trajectory(f"t{i}", float(n)) for i, n in enumerate(lengths)]
    for state in states:
        policy._rank(state)
    chosen = {s.trajectory_id: policy.choose(s, fleet).name for s in states}
    placement = place_trajectories(
        lengths, homogeneous_workers(worker_cost(policy.model, 1, len(lengths), batch_limit=8), 3)
    )
    assert policy.group_sizes == placement.group_sizes
    for rank, state in enumerate(states):  # already sorted longest first
        expected = migration_target(rank, placement.group_sizes, len(states))
        assert chosen[state.trajectory_id] == fleet[expected].name
    assert chosen["t0"] == "w0" and chosen["t11"] == "w2"


def test_a_trajectory_whose_prediction_grows_migrates_at_its_next_step() -> None:
    fleet = workers(2)
    policy = HeddlePolicy(batch_limit=4, replan_s=3600)
    states = [trajectory(f"t{i}", float(1000 - 50 * i)) for i in range(10)]
    for state in states:
        policy._rank(state)
    short = states[-1]
    short.worker = policy.choose(short, fleet).name
    assert short.worker == "w1" and short.migrations == 0
    short.predicted_remaining = 50_000.0  # the progressive predictor changed its mind
    assert policy.choose(short, fleet).name == "w0"
    assert short.migrations == 1


def test_round_robin_cycles_and_least_load_picks_the_idlest() -> None:
    fleet = workers(3)
    rr = RoundRobinPolicy()
    state = trajectory("t", 10.0)
    assert [rr.choose(state, fleet).name for _ in range(4)] == ["w0", "w1", "w2", "w0"]
    for i, count in enumerate((3, 1, 2)):
        for j in range(count):
            fleet[i].in_flight[f"{i}-{j}"] = InFlight(f"{i}-{j}", "t", "7", fleet[i])
    assert LeastLoadPolicy().choose(state, fleet).name == "w1"
    assert rr.priority(state) == 0


def test_idle_trajectories_are_forgotten_and_leave_the_ranking() -> None:
    from workers.router.forward import Forwarder
    from workers.router.pool import WorkerPool
    from workers.router.trajectories import TrajectoryTable

    table = TrajectoryTable()
    policy = HeddlePolicy()
    published: list[dict[str, object]] = []
    forwarder = Forwarder(
        WorkerPool(["http://127.0.0.1:9"]), policy, table, publish=published.append
    )
    busy = table.open("busy", job_id="7", prompt_id=None, group_id=None, prompt_tokens=3)
    quiet = table.open("quiet", job_id="7", prompt_id=None, group_id=None, prompt_tokens=3)
    for state in (busy, quiet):
        policy._rank(state)
    busy.in_flight.add("r1")
    assert forwarder.expire_idle(0.0) == 1
    assert table.get("quiet") is None and table.get("busy") is busy
    assert [key[1] for key in policy._ranked] == ["busy"]
    assert published[-1]["event"] == "expired" and published[-1]["trajectory"] == "quiet"


def test_a_stale_plan_is_replanned_after_the_request_not_on_its_path() -> None:
    import asyncio

    async def scenario() -> None:
        fleet = workers(2)
        policy = HeddlePolicy(batch_limit=4, replan_s=3600)
        first = trajectory("t0", 1000.0)
        policy.choose(first, fleet)  # no plan yet: planned on the request path
        assert policy.replans == 1
        states = [trajectory(f"t{i}", float(1000 - 50 * i)) for i in range(1, 10)]
        for state in states:  # the active set grows ninefold: the plan is stale
            policy.choose(state, fleet)
        assert policy.replans == 1  # routed on the plan they found
        await asyncio.sleep(0)
        assert policy.replans == 2  # one re-plan, at the loop's next turn
        assert sum(policy.group_sizes) == 10
        policy.choose(states[0], workers(3))  # a new worker count: planned at once
        assert policy.replans == 3

    asyncio.run(scenario())


def test_the_worker_cost_profile_is_built_once_per_active_count() -> None:
    policy = HeddlePolicy(batch_limit=4, replan_s=3600)
    first = trajectory("t0", 1000.0)
    assert policy.choose(first, workers(2)).name == "w0"
    cost = policy._costs[1, None]
    policy._replan(2)
    assert policy.replans == 2
    assert policy._costs[1, None] is cost and len(policy._costs) == 1
