"""bench/dashboard_load.py: its core (one round of live snapshots) and its measurement helpers."""

from __future__ import annotations

import os
from typing import Any

from bench.dashboard_load import process_cpu_seconds, publisher_cycle_cost
from tests.apps.dashboard.conftest import cpu_node, cpu_pool, finished_action, job

__all__ = ["cpu_node", "cpu_pool", "job"]  # fixtures shared with the dashboard tests


def test_snapshot_round_covers_every_topic(cpu_node: Any, job: Any) -> None:
    for act_s in (0.5, 1.0):
        finished_action(job, cpu_node.pool, act_s=act_s)
    cost = publisher_cycle_cost(cycles=2)
    assert cost["topics"] == 3 and cost["snapshots"] == 3  # pool:cpu, node:<id>, job:<id>
    assert 0 < cost["mean_ms"] <= cost["max_ms"]


def test_process_cpu_seconds_grows_with_work() -> None:
    before = process_cpu_seconds(os.getpid())
    total = 0
    for i in range(2_000_000):
        total += i * i
    assert total > 0
    assert process_cpu_seconds(os.getpid()) > before
