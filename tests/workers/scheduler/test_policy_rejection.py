"""A policy the scheduler cannot apply is refused, not a crash: the service keeps the version it
runs, reports the refusal in its snapshot, and keeps serving; a pass that raises is passed again
as fcfs-min and reported (the real service, a real local agent, the in-memory store)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.workers.scheduler.memory_store import MemoryStore
from tests.workers.scheduler.test_service import Harness, _record
from workers.scheduler import SchedulerService

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def harness(tmp_path: Path, starts_processes: None) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path, MemoryStore())
    harness.store.policy = (1, {"algorithm": "elastic", "max_dop": 2})
    async with harness.running() as running:
        yield running


async def _until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


def _elastic(action_id: int) -> Any:
    """A reward-like action: 1–2 elastic cores, a known single-core duration."""
    return replace(
        _record(action_id, "true"),
        demand={"cpu": {"min": 1, "max": 2}},
        elasticity={"resource": "cpu", "efficiency": [1.0, 0.9]},
        single_unit_duration_s=0.1,
    )


async def test_a_policy_it_cannot_apply_is_rejected_and_reported(harness: Harness) -> None:
    service = harness.service
    assert isinstance(service, SchedulerService) and service.scheduler is not None
    assert service.policy.version == 1 and service.scheduler.max_dop == 2
    snapshots: list[dict[str, Any]] = []

    async def capture(pool: str, snapshot: dict[str, Any]) -> None:
        snapshots.append(snapshot)

    service.publish_snapshot = capture
    # Written past the edges' validation (a direct database write, an older release's row).
    harness.store.policy = (2, {"min_dop": 4, "max_dop": 2, "depth": True})
    await _until(lambda: service.policy.rejected is not None)
    assert service.policy.version == 1 and service.scheduler.max_dop == 2
    rejected = service.policy.rejected
    assert rejected is not None and rejected["version"] == 2
    assert "settings.depth" in rejected["reason"] and "settings.max_dop" not in rejected["reason"]
    await _until(lambda: any(s.get("policy_rejected") for s in snapshots))
    assert snapshots[-1]["policy_version"] == 1

    harness.store.records[11] = _elastic(11)  # it keeps serving on v1
    await harness.submit(11)
    await harness.wait_status(11, {"succeeded"})

    harness.store.policy = (3, {"algorithm": "elastic", "min_dop": 2, "max_dop": 2})
    await _until(lambda: service.policy.version == 3)
    assert service.policy.rejected is None and service.scheduler.min_dop == 2


async def test_min_dop_above_the_demand_minimum_runs_instead_of_crashing(harness: Harness) -> None:
    """The defect's own scenario through the service: min_dop 2 with several 1–2 core actions
    waiting on a 2-core node."""
    service = harness.service
    assert service is not None
    harness.store.policy = (2, {"algorithm": "elastic", "min_dop": 2, "max_dop": 2})
    await _until(lambda: service.policy.version == 2)
    ids = list(range(21, 27))
    for action_id in ids:
        harness.store.records[action_id] = _elastic(action_id)
    await harness.submit(*ids)
    for action_id in ids:
        await harness.wait_status(action_id, {"succeeded"})
        assert harness.store.finished[action_id].status == "succeeded"
    assert service.counters.pass_failures == 0 and service.counters.recoveries == 0


async def test_a_pass_that_raises_is_passed_again_and_reported(harness: Harness) -> None:
    service = harness.service
    assert service is not None and service.scheduler is not None
    scheduler = service.scheduler
    real_schedule = scheduler.schedule

    def broken_when_elastic(now: float) -> Any:
        if scheduler.algorithm == "elastic" and scheduler.waiting_count:
            raise RuntimeError("a bug in the elastic pass")
        return real_schedule(now)

    scheduler.schedule = broken_when_elastic  # type: ignore[method-assign]
    harness.store.records[31] = _elastic(31)
    await harness.submit(31)
    await harness.wait_status(31, {"succeeded"})
    assert service.counters.pass_failures >= 1 and service.counters.recoveries == 0
    assert service.counters.last_pass_error is not None
    assert "a bug in the elastic pass" in service.counters.last_pass_error["reason"]
    assert scheduler.algorithm == "elastic" and scheduler.max_dop == 2  # its policy is back
