"""ARTOS elastic actors scaling between iterations (adaptive batch size, artos §4.3) against Ray,
in one run: PPO on CartPole whose actor count follows a schedule (4 -> 8 -> 2 -> 4), the same
actor program, learner and hyper-parameters in both systems, each in a fresh process tree.

Loom forks however many actors an iteration asks for from its one zygote (an actor left out
is a checkpoint until it is asked for again; no process is restarted). Ray creates actors when
the count grows (a worker process each, importing and preparing the program) and kills them
when it shrinks (``ray.kill``, which gives their cores back, as Loom's elastic actors do).

A change's cost is what the iteration that changes the count takes beyond a steady iteration
of the same count (the median of the iterations that kept the count, the run's first iteration
left out): wall time and CPU-seconds of the whole process tree. Targets: Loom's zygote is
started once per run, and Loom's added cost of a scale-up is at most a quarter of Ray's, in
wall time and in CPU-seconds (medians over the scale-ups of every repetition).
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
from typing import Any

from bench._artos_compare import SYSTEMS, learner_device, ray_missing, run_system
from bench._artos_workload import Workload
from bench.report import BenchReport, Target

NAME = "artos_scaling"
SCALE_UP_COST_BOUND = 0.25  # Loom's added cost of a scale-up, as a share of Ray's


def workload(quick: bool) -> Workload:
    schedule = (2, 2, 4, 4, 2, 2) if quick else (4, 4, 4, 8, 8, 8, 2, 2, 2, 4, 4, 4)
    return Workload(
        algorithm="ppo_scaling",
        program="workers.actors.gym_programs:ppo",
        actors=schedule[0],
        steps=128,
        target_return=1e9,  # never reached: the schedule sets the run's length
        window=20,
        max_env_steps=10**9,
        actor_schedule=schedule,
    )


def scaling_costs(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """Each change of the actor count: what its iteration took beyond a steady iteration of
    the new count (the median of those that kept the count; the first iteration, which starts
    the actors, is neither)."""
    steady: dict[float, list[dict[str, float]]] = {}
    for previous, row in itertools.pairwise(rows):
        if row["actors"] == previous["actors"]:
            steady.setdefault(row["actors"], []).append(row)
    changes = []
    for previous, row in itertools.pairwise(rows):
        if row["actors"] == previous["actors"] or row["actors"] not in steady:
            continue
        base = steady[row["actors"]]
        changes.append(
            {
                "iteration": row["iteration"],
                "from": previous["actors"],
                "to": row["actors"],
                "added_s": row["iteration_s"] - statistics.median(r["iteration_s"] for r in base),
                "added_cpu_s": row["cpu_s"] - statistics.median(r["cpu_s"] for r in base),
                "steady_s": statistics.median(r["iteration_s"] for r in base),
                "steady_cpu_s": statistics.median(r["cpu_s"] for r in base),
            }
        )
    return changes


def _median_of(changes: list[dict[str, float]], key: str, up: bool) -> float | None:
    values = [c[key] for c in changes if (c["to"] > c["from"]) == up]
    return statistics.median(values) if values else None


def _ratio(loom: float | None, ray: float | None) -> float:
    if loom is None or ray is None or ray <= 0:
        return math.inf
    return loom / ray


def run(quick: bool = False) -> BenchReport:
    chosen = workload(quick)
    repetitions = 1 if quick else 3
    params: dict[str, Any] = {
        "workload": chosen.to_json(),
        "repetitions": repetitions,
        "cores": sorted(os.sched_getaffinity(0)),
        "load_average_at_start": os.getloadavg()[0],
        "clock_starts": "after the platform is up (ray.init; Loom's buffer service)",
    }
    report = BenchReport(NAME, quick, params=params)
    missing = ray_missing()
    if missing:
        print(f"[{NAME}] skipped: {missing}")
        return report.skip(RuntimeError(missing), "ray_importable")
    device = learner_device()
    runs: dict[str, list[dict[str, Any]]] = {system: [] for system in SYSTEMS}
    for repetition in range(repetitions):
        order = SYSTEMS if repetition % 2 == 0 else tuple(reversed(SYSTEMS))
        for system in order:
            result = run_system(system, chosen, device, timeout_s=300)
            result.pop("curve", None)
            result["repetition"] = repetition
            result["scaling_changes"] = scaling_costs(result["iterations"])
            runs[system].append(result)
    summary: dict[str, Any] = {}
    for system in SYSTEMS:
        changes = [c for r in runs[system] for c in r["scaling_changes"]]
        for direction, up in (("up", True), ("down", False)):
            for key in ("added_s", "added_cpu_s"):
                summary[f"{system}_scale_{direction}_{key}"] = _median_of(changes, key, up)
        summary[f"{system}_median_first_iteration_s"] = statistics.median(
            r["iterations"][0]["iteration_s"] for r in runs[system]
        )
        summary[f"{system}_median_total_cpu_s"] = statistics.median(
            r["total_cpu_s"] for r in runs[system]
        )
    time_ratio = _ratio(summary["loom_scale_up_added_s"], summary["ray_scale_up_added_s"])
    cpu_ratio = _ratio(summary["loom_scale_up_added_cpu_s"], summary["ray_scale_up_added_cpu_s"])
    summary.update(scale_up_time_ratio=time_ratio, scale_up_cpu_ratio=cpu_ratio)
    report.series = {"runs": runs, "summary": summary}
    report.targets += [
        Target.is_true(
            "loom_zygote_started_once_per_run",
            all(r["zygote_starts"] == 1 for r in runs["loom"]),
        ),
        Target.at_most("loom_scale_up_wall_cost_vs_ray", time_ratio, SCALE_UP_COST_BOUND),
        Target.at_most("loom_scale_up_cpu_cost_vs_ray", cpu_ratio, SCALE_UP_COST_BOUND),
    ]
    return report
