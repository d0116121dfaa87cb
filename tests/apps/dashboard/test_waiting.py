from apps.dashboard.waiting import PoolState, WaitingAction, wait_reason

POOL = PoolState(
    name="cpu",
    online_nodes=1,
    free_units={"cpu": 2},
    total_units={"cpu": 8},
    quota_in_use={"search": 4},
    quota_limit={"search": 4},
    loaded_services=frozenset({"reward-a"}),
)


def test_no_cores_free_names_need_and_free() -> None:
    action = WaitingAction(key_resource="cpu", min_units=4, queued_ahead=0)
    assert wait_reason(action, POOL) == "no cores free: needs 4, 2 of 8 free"


def test_quota_exhausted() -> None:
    action = WaitingAction(key_resource="api:search", min_units=1, queued_ahead=0)
    assert wait_reason(action, POOL) == "quota exhausted: search has 4/4 calls in flight"


def test_service_loading_when_not_resident() -> None:
    action = WaitingAction(key_resource="cpu", min_units=1, queued_ahead=0, service="judge")
    assert wait_reason(action, POOL).startswith("service loading: judge")


def test_fcfs_position_then_next_in_line() -> None:
    assert "behind 3 earlier" in wait_reason(WaitingAction("cpu", 1, 3), POOL)
    assert wait_reason(WaitingAction("cpu", 1, 0), POOL).startswith("next in line")


def test_no_online_node_and_no_pool() -> None:
    drained = PoolState(name="cpu", online_nodes=0)
    assert "no online node" in wait_reason(WaitingAction("cpu", 1, 0), drained)
    assert wait_reason(WaitingAction("cpu", 1, 0), None) == "no resource pool can run it"


def test_job_quota_comes_before_pool_capacity() -> None:
    action = WaitingAction("cpu", 2, 0, job_held_units=31, job_quota_units=32)
    assert wait_reason(action, POOL) == "job quota exhausted: holds 31 of 32 cpu"
