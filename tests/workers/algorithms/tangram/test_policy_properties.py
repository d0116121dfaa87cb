"""Random valid policies × random queues: the pass never raises, allocations respect the DoP
bounds and the pool, and every action is eventually scheduled (scheduler.py's DoP-bounds rule).

Policies are drawn within the bounds ``policy_check`` enforces for the pool, then checked by it
(so the validator is also tested to accept every valid policy), and changed live mid-run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.algorithms.tangram import (
    ActionSpec,
    BasicLimit,
    BasicTopology,
    CpuNodeSpec,
    CpuTopology,
    Elasticity,
    ElasticScheduler,
    GpuServiceSpec,
    GpuTopology,
    ResourceDemand,
    Topology,
)
from workers.algorithms.tangram.policy import SCHEDULER_FIELDS, policy_check

from .test_scheduler import _check, _reward

KINDS = ("cpu", "gpu", "basic")
CHUNKS = (1, 2, 4, 8)


@dataclass
class Pool:
    kind: str
    topology: Topology
    key: str
    largest: int  # most key units one action can hold
    smallest: int  # what every group can give one action


def _pool(kind: str, sizes: list[int]) -> Pool:
    if kind == "cpu":
        nodes = [CpuNodeSpec.uniform(f"n{i}", c, 1, memory_mb=1 << 16) for i, c in enumerate(sizes)]
        return Pool(kind, CpuTopology(nodes), "cpu", max(sizes), min(sizes))
    if kind == "gpu":
        per_node = CHUNKS[sizes[0] % 4]
        services = {f"s{i}": GpuServiceSpec(f"s{i}", 1_000.0 * (i + 1)) for i in range(3)}
        names = [f"g{i}" for i in range(len(sizes))]
        topology = GpuTopology(names, services, gpus_per_node=per_node, gpu_memory_mb=80_000)
        return Pool(kind, topology, "gpu", per_node, per_node)
    concurrency = sizes[0]
    limits = {"api:0": BasicLimit(concurrency=concurrency), "api:1": BasicLimit(concurrency=3)}
    return Pool(kind, BasicTopology(limits), "api:0", concurrency, concurrency)


def _demand(kind: str, low: int, width: int, pick: int) -> ResourceDemand:
    if kind == "gpu":
        allowed = [c for c in CHUNKS if c >= CHUNKS[low % 4]][: 1 + width % 4]
        return ResourceDemand.one_of(allowed) if pick % 2 else ResourceDemand.between(1, 8)
    if pick % 3 == 0:
        return ResourceDemand.one_of(sorted({low, low + width, low + 2 * width}))
    return ResourceDemand.between(low, low + width)


def _spec(pool: Pool, n: int, draw: tuple[int, int, int, int]) -> ActionSpec:
    low, width, pick, t1 = draw
    elastic = pick % 4 != 3
    demand = _demand(pool.kind, low, width, pick)
    resources: dict[str, ResourceDemand] = {pool.key: demand}
    if pool.kind == "cpu" and pick % 5 == 0:
        resources["memory_mb"] = ResourceDemand.exactly(64)
    return ActionSpec(
        f"a{n}",
        resources,
        tool=f"tool{pick % 3}",
        key_resource=pool.key if elastic or pick % 2 else None,
        elasticity=Elasticity.amdahl(0.9, max(demand.maximum, 1)) if elastic else None,
        t1=float(t1) if t1 else None,
        trajectory_id=f"t{pick % 4}" if pool.kind == "cpu" and pick % 2 else None,
        service=f"s{pick % 3}" if pool.kind == "gpu" else None,
    )


@st.composite
def _policy(draw: Any, pool: Pool) -> dict[str, Any]:
    """A valid policy for the pool, some fields left out (they take clamped defaults)."""
    low = draw(st.integers(1, pool.smallest))
    high = draw(st.integers(low, pool.largest))
    full = {
        "algorithm": draw(st.sampled_from(("elastic", "fcfs-min", "fixed-dop"))),
        "depth": draw(st.integers(1, 4)),
        "min_dop": low,
        "max_dop": high,
        "fixed_dop": draw(st.integers(low, high)),
        "estimate_window": draw(st.integers(0, 64)),
    }
    kept = draw(st.sets(st.sampled_from(sorted(full))))
    given_settings = {k: v for k, v in full.items() if k in kept}
    clean, problems = policy_check(
        given_settings, dop_limit=pool.largest, min_dop_limit=pool.smallest
    )
    assert problems == [], (given_settings, problems)
    return {name: clean[name] for name in SCHEDULER_FIELDS}


_op = st.tuples(
    st.sampled_from(["submit", "submit", "submit", "complete", "cancel", "policy"]),
    st.tuples(st.integers(1, 8), st.integers(0, 8), st.integers(0, 59), st.integers(0, 40)),
)


def _assert_within_policy(
    scheduler: ElasticScheduler, pool: Pool, spec: ActionSpec, units: int
) -> None:
    """A scalable action's key units lie in its feasible set and, whenever the pool can give
    some feasible count inside the bounds, inside the bounds; others get their minimum."""
    demand = spec.resources[pool.key]
    assert units in demand.options()
    assert units <= pool.largest
    if not spec.scalable or spec.key_resource is None:
        assert units == demand.minimum
        return
    low = min(scheduler.min_dop or 1, pool.smallest)
    high = scheduler.max_dop or units
    usable = pool.topology.unit_counts(pool.key, demand.options())
    if any(low <= u <= high for u in usable):
        assert low <= units <= high, (units, low, high, demand)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), sizes=st.lists(st.integers(1, 16), min_size=1, max_size=3))
def test_random_policies_and_queues_never_raise_and_respect_bounds(
    kind: str, data: st.DataObject, sizes: list[int]
) -> None:
    pool = _pool(kind, sizes)
    scheduler = ElasticScheduler(pool.topology, **data.draw(_policy(pool)))
    ops = data.draw(st.lists(_op, min_size=1, max_size=40))
    specs: dict[str, ActionSpec] = {}
    running: list[str] = []
    now = 0.0
    for n, (op, values) in enumerate(ops):
        now += values[2] % 3
        if op == "submit":
            spec = _spec(pool, n, values)
            try:
                scheduler.submit(spec, now)
            except ValueError:
                continue  # a demand this pool can never meet is refused at submission
            specs[spec.action_id] = spec
        elif op == "complete" and running:
            scheduler.complete(running.pop(values[2] % len(running)), now)
        elif op == "cancel" and scheduler.waiting_ids():
            waiting = scheduler.waiting_ids()
            assert scheduler.cancel(waiting[values[2] % len(waiting)], now)
        elif op == "policy":
            scheduler.set_policy(**data.draw(_policy(pool)))
        for assignment in scheduler.schedule(now):
            spec = specs[assignment.action_id]
            _assert_within_policy(scheduler, pool, spec, assignment.units[pool.key])
            running.append(assignment.action_id)
        _check("basic" if kind == "basic" else kind, pool.topology)
    for _ in range(300):  # drain: no valid policy starves an action
        if not scheduler.waiting_ids() and not running:
            break
        now += 61.0
        for action_id in running:
            scheduler.complete(action_id, now)
        running = []
        for assignment in scheduler.schedule(now):
            spec = specs[assignment.action_id]
            _assert_within_policy(scheduler, pool, spec, assignment.units[pool.key])
            running.append(assignment.action_id)
        _check("basic" if kind == "basic" else kind, pool.topology)
    assert not scheduler.waiting_ids() and not running


def test_min_dop_above_the_demand_minimum_no_longer_breaks_the_pass() -> None:
    """The defect: admission reserved the demand's minimum while DPArrange allowed only counts
    ≥ ``min_dop``, so a full node left a prefix that "cannot be arranged"."""
    pool = CpuTopology([CpuNodeSpec.uniform("n0", 8, 1, memory_mb=1 << 20)])
    scheduler = ElasticScheduler(pool, min_dop=4)
    for i in range(8):
        scheduler.submit(_reward(f"r{i}", 60.0), 0.0)
    started = scheduler.schedule(0.0)
    assert started and all(a.dop >= 4 for a in started)
    assert sum(a.dop for a in started) <= 8
    assert scheduler.schedule(1.0) == []  # the rest wait for cores instead of crashing


def test_bounds_that_exclude_the_demand_yield_to_it() -> None:
    assert ResourceDemand.between(1, 4).options(8, 16) == (4,)
    assert ResourceDemand.between(6, 8).options(1, 2) == (6,)
    assert ResourceDemand.one_of([1, 2, 4, 8]).options(3, 3) == (2,)
    assert ResourceDemand.one_of([1, 2, 4, 8]).options(3, 8) == (4, 8)


def test_min_dop_is_lowered_to_the_smallest_node() -> None:
    """A trajectory pinned to a 2-core node still starts under min_dop 6."""
    nodes = [CpuNodeSpec.uniform("small", 2, 1, 1 << 20), CpuNodeSpec.uniform("big", 8, 1, 1 << 20)]
    scheduler = ElasticScheduler(CpuTopology(nodes), min_dop=6)
    for i in range(3):
        scheduler.submit(_reward(f"r{i}", 10.0, trajectory="t", max_dop=8), float(i))
    assert len(scheduler.schedule(0.0)) >= 1
