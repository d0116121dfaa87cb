"""benches artos_ppo and artos_offpolicy in quick mode: both systems train to the target return,
curves and CPU figures recorded, the plot drawn, no process of either run left behind."""

from __future__ import annotations

from types import ModuleType

import pytest

from bench import _artos_compare, artos_offpolicy, artos_ppo
from bench._artos_cpu import tree_pids

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("bench", [artos_ppo, artos_offpolicy], ids=lambda m: m.NAME)
def test_quick_run_compares_both_systems(bench: ModuleType, tmp_path):
    missing = _artos_compare.ray_missing()
    if missing:
        print(f"skipped: {missing}")
        pytest.skip(missing)
    workload = bench.workload(quick=True)
    before = set(tree_pids())  # an earlier test's helpers (multiprocessing's resource tracker)
    report = _artos_compare.compare(
        bench.NAME, True, workload, repetitions=1, timeout_s=280, plot_dir=tmp_path
    )
    runs = report.series["runs"]
    for system in ("loom", "ray"):
        (result,) = runs[system]
        assert result["curve"] and result["env_steps"] > 0
        assert result["leftover_processes_killed"] == 0, (system, result["leftover_processes"])
        assert result["total_cpu_s"] > 0 and result["learner_held_s"] > 0
    assert runs["loom"][0]["learner_leases"] >= 1 and runs["ray"][0]["learner_leases"] == 1
    assert runs["loom"][0]["zygote_started_by"] == "fork"  # a run's process has no threads yet
    niceness = report.series["actor_niceness"]  # each learner outranks its own actors alike
    assert niceness["loom"] == niceness["ray"] and niceness["loom"][0] > 0
    assert {t.name for t in report.targets} >= {
        "cpu_seconds_saving_vs_ray",
        "end_to_end_time_ratio_vs_ray",
        "learner_device_seconds_saving_vs_ray",
        "returns_match_env_steps_to_target_ratio_within_2_3_to_3_2",
    }
    assert (tmp_path / f"{bench.NAME}_quick.png").exists()
    assert set(tree_pids()) <= before  # every run's processes (Ray's daemons too) are gone
