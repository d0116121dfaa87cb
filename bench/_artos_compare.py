"""ARTOS-on-Loom against Ray on one reference workload, repeated, in one bench run (artos §6.2).

Each repetition runs both systems, one after the other (alternating which goes first), each in a
fresh process tree (``bench._artos_run``). Per system and repetition: the wall time and the
CPU-seconds of the whole tree until the learner first sees the target return, the learner's
device-held seconds, and the learning curve. Targets are medians of the per-repetition ratios.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._artos_loom import ACTOR_NICENESS, KEEP_WARM_S, ZYGOTE_START
from bench._artos_workload import Workload
from bench.report import BenchReport, Target, plot_path

SYSTEMS = ("loom", "ray")
CPU_SAVING_BOUND = 0.30  # issue 20: >= 30 % fewer CPU-seconds (paper: -49.89 %)
DEVICE_SAVING_BOUND = 0.30  # and learner device-seconds (paper: -57.41 % GPU time)
END_TO_END_BOUND = 1.0  # end-to-end no worse than Ray's
SAMPLE_EFFICIENCY_BAND = (2 / 3, 3 / 2)  # env steps to the target, Loom / Ray: same learning


def ray_missing() -> str | None:
    """Why the Ray baseline cannot run here, or None."""
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (pip install ray==2.60.0, requirements/dev.txt)"
    return None


def learner_device() -> str:
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def run_system(system: str, workload: Workload, device: str, timeout_s: float) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="artos-run-") as directory:
        out = Path(directory) / "result.json"
        command = [sys.executable, "-m", "bench._artos_run", "--system", system]
        command += ["--workload", json.dumps(workload.to_json()), "--device", device]
        command += ["--out", str(out)]
        completed = subprocess.run(
            command, cwd=root, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if completed.returncode != 0 or not out.exists():
            raise RuntimeError(f"{system} run failed: {completed.stderr[-1500:]}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def _ratio(loom: float | None, ray: float | None) -> float | None:
    if loom is None or ray is None or ray <= 0:
        return None
    return loom / ray


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def compare(
    name: str,
    quick: bool,
    workload: Workload,
    repetitions: int,
    timeout_s: float,
    plot_dir: Path | None = None,
) -> BenchReport:
    device = learner_device()
    params: dict[str, Any] = {
        "workload": workload.to_json(),
        "repetitions": repetitions,
        "learner_device": device,
        "cores": sorted(os.sched_getaffinity(0)),
        "load_average_at_start": os.getloadavg()[0],
        "clock_starts": "after the platform is up (ray.init; Loom's buffer service), before "
        "either system starts its actors; the platform's own start is in platform_start_*",
        "loom_actor_keep_warm_s": KEEP_WARM_S,
        "loom_zygote_start": ZYGOTE_START,
        "loom_actor_niceness": ACTOR_NICENESS,
    }
    report = BenchReport(name, quick, params=params)
    missing = ray_missing()
    if missing:
        print(f"[{name}] skipped: {missing}")
        return report.skip(RuntimeError(missing), "ray_importable")
    runs: dict[str, list[dict[str, Any]]] = {system: [] for system in SYSTEMS}
    for repetition in range(repetitions):
        order = SYSTEMS if repetition % 2 == 0 else tuple(reversed(SYSTEMS))
        for system in order:
            result = run_system(system, workload, device, timeout_s)
            result["repetition"] = repetition
            runs[system].append(result)
    ratios = []
    for loom, ray in zip(runs["loom"], runs["ray"], strict=True):
        ratios.append(
            {
                "repetition": loom["repetition"],
                "both_reached": loom["reached"] and ray["reached"],
                "cpu_s": _ratio(loom["cpu_to_target_s"], ray["cpu_to_target_s"]),
                "end_to_end": _ratio(loom["time_to_target_s"], ray["time_to_target_s"]),
                "learner_device_s": _ratio(_held_to_target(loom), _held_to_target(ray)),
                "env_steps": _ratio(loom["env_steps_to_target"], ray["env_steps_to_target"]),
                "total_cpu_s_with_platform": _ratio(loom["total_cpu_s"], ray["total_cpu_s"]),
                "actor_held_core_s": _ratio(
                    loom.get("actor_held_core_s"), ray.get("actor_held_core_s")
                ),
            }
        )
    summary = {
        key: _median([r[key] for r in ratios])
        for key in (
            "cpu_s",
            "end_to_end",
            "learner_device_s",
            "env_steps",
            "total_cpu_s_with_platform",
            "actor_held_core_s",
        )
    }
    for system in SYSTEMS:
        for key in ("cpu_to_target_s", "time_to_target_s", "env_steps_to_target"):
            summary[f"{system}_median_{key}"] = _median([r[key] for r in runs[system]])
        summary[f"{system}_median_learner_held_s"] = _median(
            [_held_to_target(r) for r in runs[system]]
        )
        for key in ("on_cpu_s", "runnable_waiting_s", "blocked_s"):
            summary[f"{system}_median_learner_thread_{key}"] = _median(
                [(r.get("learner_thread_to_target") or {}).get(key) for r in runs[system]]
            )
        summary[f"{system}_median_platform_start_cpu_s"] = _median(
            [r["platform_start_cpu_s"] for r in runs[system]]
        )
        summary[f"{system}_leftover_processes"] = sum(
            r["leftover_processes_killed"] for r in runs[system]
        )
    niceness = {  # each system's actor processes, as they read it themselves
        system: sorted({n for r in runs[system] for n in r.get("actor_niceness", [])})
        for system in SYSTEMS
    }
    report.series = {
        "runs": runs,
        "ratios": ratios,
        "summary": summary,
        "actor_niceness": niceness,
    }
    all_reached = all(r["both_reached"] for r in ratios)
    low, high = SAMPLE_EFFICIENCY_BAND
    steps_ratio = summary["env_steps"]
    report.targets += [
        Target.is_true("both_systems_reached_the_target_return_in_every_repetition", all_reached),
        Target.is_true(
            "returns_match_env_steps_to_target_ratio_within_2_3_to_3_2",
            steps_ratio is not None and low <= steps_ratio <= high,
        ),
        Target.at_least(
            "cpu_seconds_saving_vs_ray", 1 - (summary["cpu_s"] or float("inf")), CPU_SAVING_BOUND
        ),
        Target.at_least(
            "learner_device_seconds_saving_vs_ray",
            1 - (summary["learner_device_s"] or float("inf")),
            DEVICE_SAVING_BOUND,
        ),
        Target.at_most(
            "end_to_end_time_ratio_vs_ray", summary["end_to_end"] or float("inf"), END_TO_END_BOUND
        ),
    ]
    _plot(f"{name}_quick" if quick else name, workload, runs, plot_dir)
    return report


def _held_to_target(run: dict[str, Any]) -> float | None:
    """Learner device-held seconds of the run (it ends when the target is reached)."""
    return run["learner_held_s"] if run["reached"] else None


def _plot(
    name: str, workload: Workload, runs: dict[str, list[dict[str, Any]]], plot_dir: Path | None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colours = {"loom": "tab:blue", "ray": "tab:orange"}
    for system, results in runs.items():
        for index, result in enumerate(results):
            curve = [p for p in result["curve"] if p["mean_return"] is not None]
            label = f"{system} (ARTOS on Loom)" if system == "loom" else system
            for axis, x_key in zip(axes, ("env_steps", "t_s", "cpu_s"), strict=True):
                axis.plot(
                    [p[x_key] for p in curve],
                    [p["mean_return"] for p in curve],
                    color=colours[system],
                    alpha=0.8,
                    linewidth=1,
                    label=label if index == 0 else None,
                )
    titles = ("environment steps", "job wall time (s)", "job CPU-seconds, all processes")
    for axis, title in zip(axes, titles, strict=True):
        axis.axhline(workload.target_return, color="grey", linestyle="--", linewidth=0.8)
        axis.set_xlabel(title)
        axis.set_ylabel(f"mean return, last {workload.window} episodes")
        axis.legend(loc="lower right")
    figure.suptitle(f"{name}: {workload.algorithm.upper()} on CartPole-v1, ARTOS on Loom vs Ray")
    figure.tight_layout()
    path = plot_path(name) if plot_dir is None else plot_dir / f"{name}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
