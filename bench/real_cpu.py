"""A real elastic workload on this machine's cores: elastic vs fixed DoP 1 vs static reservation.

``python -m bench real_cpu``: test suites with
``pytest -n {dop}`` really run, through the real scheduler service (ARL-Tangram, arl-tangram §4
Alg. 1) and the real local agent (cgroup cpusets, §5.2 allocate-on-execution) of the embedded
runtime, on PostgreSQL (a throwaway database). Mean ACT (finished − submitted, §2.4) is compared.

Workload (the same for every approach): waves of AI-coding trajectories, each wave a burst then a
thinning tail (``_arrivals``); a trajectory runs a short shell step (one core), "LLM thinking",
then its reward — the test suite of a small generated project (``workers/demo/projects``),
``pytest -n {dop}``, elastic on 1 … all cores. The suite's t1 and E(m) are measured at the start
of the run (``_calibrate``) and given to the scheduler as the trainer's profile would.

Approaches:

- ``elastic``: the scheduler policy "elastic" (Alg. 1): a suite alone gets every free core.
- ``fixed-dop-1``: the same scheduler with policy "fixed-dop", fixed_dop = 1.
- ``reservation``: static per-trajectory reservation (a pod per trajectory, as Kubernetes-style
  provisioning): one action per trajectory holds the trajectory's peak demand (all cores of the
  suite) for its whole life — both shell steps, the thinking pauses and the suite run inside it.
  Each step's ACT is taken from timestamps the script prints: the first step also waits for the
  reservation; later steps are ready when the previous one ended plus the thinking pause.

The simulator (``bench/tangram_cpu.py``) finds elastic ahead of both at scale (its figures are in
bench/results/); here the ratios must point the same way: both > 1.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench._execution import Unavailable, django_env, run_child, throwaway_database
from bench.report import BenchReport, Target, plot_path

POOL = "cpu"
SHELL_STEP = "python3 -c 'print(sum(i * i for i in range(300_000)))'"
SUITE_TESTS = 16
SUITE_ROUNDS = 220  # a suite of a few seconds on one idle core


def _calibrate(scratch: Path, project: dict[str, int], cores: int) -> dict[str, Any]:
    """The suite's single-core time and E(m) measured now, on this machine, as the trainer's
    profile would give them (arl-tangram §4.1: t1 and the efficiency curve are inputs)."""
    import shutil
    import subprocess

    from workers.demo.projects import reward_command

    times: dict[int, float] = {}
    for dop in sorted({1, cores}):
        workdir = scratch / f"calibrate-{dop}"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir()
        command = reward_command(
            tests=project["tests"], rounds_per_test=project["rounds_per_test"]
        ).replace("{dop}", str(dop))
        started = time.perf_counter()
        subprocess.run(command, shell=True, cwd=workdir, check=True, capture_output=True)
        times[dop] = time.perf_counter() - started
    efficiency = [1.0] + [
        min(1.0, times[1] / (m * times[cores])) for m in range(2, cores + 1) if m == cores
    ]
    if cores > 2:  # only 1 and ``cores`` were measured: interpolate in between
        last = efficiency[-1]
        efficiency = [1.0 - (1.0 - last) * (m - 1) / (cores - 1) for m in range(1, cores + 1)]
    return {"t1_s": times[1], "efficiency": [round(e, 3) for e in efficiency]}


def _settings(policy: str) -> dict[str, Any]:
    if policy == "fixed-dop-1":
        return {"algorithm": "fixed-dop", "fixed_dop": 1, "depth": 2}
    return {"algorithm": "elastic", "depth": 2}


def run_all(params: dict[str, Any]) -> dict[str, Any]:
    """(Django child) Seed, then run every approach on the same workload; per-action ACTs."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from apps.jobs.models import Job
    from apps.resources.models import PoolKind, ResourcePool

    call_command("migrate", verbosity=0, interactive=False)
    pool = ResourcePool.objects.create(name=POOL, kind=PoolKind.CPU)
    job = Job.objects.create(name="real-cpu", owner=User.objects.create_user("bench"))
    scratch = Path(params["scratch"])
    suite = params.get("suite") or {"tests": SUITE_TESTS, "rounds_per_test": SUITE_ROUNDS}
    project = dict(suite)  # written into each sandbox by its reward action
    params = {**params, **_calibrate(scratch, project, params["cores"])}
    results: dict[str, Any] = {"calibration": {k: params[k] for k in ("t1_s", "efficiency")}}
    for approach in params["approaches"]:
        results[approach] = asyncio.run(_run_approach(approach, params, pool, job, project))
    return results


async def _run_approach(
    approach: str, params: dict[str, Any], pool: Any, job: Any, project: dict[str, int]
) -> dict[str, Any]:
    from apps.embedded.runtime import EmbeddedRuntime
    from apps.policies.models import Policy, PolicyKind

    def set_policy() -> None:
        current = Policy.objects.filter(name="bench-real-cpu").first()
        version = (current.version + 1) if current is not None else 1
        Policy.objects.update_or_create(
            name="bench-real-cpu",
            defaults={
                "kind": PolicyKind.ACTION_SCHEDULER,
                "pool": pool,
                "settings": _settings(approach),
                "version": version,
            },
        )

    await asyncio.to_thread(set_policy)
    cores = sorted(os.sched_getaffinity(0))[: params["cores"]]
    work_root = Path(params["scratch"]) / f"work-{approach}"
    runtime = EmbeddedRuntime(work_root=work_root, cores=cores)
    await runtime.start()
    started = time.perf_counter()
    try:
        trajectories = [
            _trajectory(approach, index, params, job, project, len(cores))
            for index in range(len(params["arrivals_s"]))
        ]
        per_trajectory = await asyncio.gather(*trajectories)
    except BaseException:
        _ABORT.set()
        raise
    finally:
        await runtime.stop()
    makespan = time.perf_counter() - started
    shell = [a for t in per_trajectory for a in t["shell"]]
    suites = [a for t in per_trajectory for a in t["suite"]]
    return {
        "act_all_s": shell + suites,
        "act_suite_s": suites,
        "act_shell_s": shell,
        "makespan_s": makespan,
        "suite_dops": [d for t in per_trajectory for d in t["dops"]],
    }


async def _trajectory(
    approach: str, index: int, params: dict[str, Any], job: Any, project: dict[str, int], cores: int
) -> dict[str, list[float]]:
    from apps.actions.services import ActionSpec, action_submit
    from apps.core.demand import parse_demand
    from apps.trajectories.services import trajectory_create
    from workers.demo.projects import reward_command

    await asyncio.sleep(params["arrivals_s"][index])
    trajectory = await asyncio.to_thread(trajectory_create, job=job)
    think = params["think_s"]

    async def submit(command: str, demand: dict[str, Any], **extra: Any) -> Any:
        from apps.resources.models import ResourcePool

        def go() -> int:
            pool = ResourcePool.objects.get(name=POOL)
            spec = ActionSpec(
                demand=parse_demand(demand, extra.pop("elasticity", None)),
                pool_id=pool.pk,
                trajectory_id=trajectory.pk,
                command=command,
                timeout_s=300.0,
                **extra,
            )
            return int(action_submit(job=job, spec=spec).action.pk)

        action_id = await asyncio.to_thread(go)
        return await asyncio.get_running_loop().run_in_executor(_WAITERS, _wait_ended, action_id)

    if approach == "reservation":
        suite = reward_command(
            tests=project["tests"], rounds_per_test=project["rounds_per_test"]
        ).replace("{dop}", str(cores))
        stamp = "date +%s.%N"
        steps = params["shell_steps"]
        script = (
            f"echo E0 $({stamp}); "
            + "; ".join(f"{SHELL_STEP} >/dev/null; echo E{i + 1} $({stamp}); sleep {think}"
                        for i in range(steps))
            + f"; ({suite}) >/dev/null 2>&1; echo RC $?; echo DONE $({stamp})"
        )  # fmt: skip
        arrival = time.time()
        row = await submit(script, {"cpu": cores})
        marks = {
            line.split()[0]: float(line.split()[1])
            for line in row["output"].splitlines()
            if len(line.split()) == 2
        }
        if row["status"] != "succeeded" or marks.get("RC") != 0:
            raise RuntimeError(f"reservation of trajectory {index} failed: {row}")
        # Step i is ready at arrival (i = 0) or when step i-1 ended plus the thinking pause.
        ready = [arrival] + [marks[f"E{i}"] + think for i in range(1, steps + 1)]
        ends = [marks[f"E{i}"] for i in range(1, steps + 1)] + [marks["DONE"]]
        acts = [end - start for start, end in zip(ready, ends, strict=True)]
        return {"shell": acts[:-1], "suite": acts[-1:], "dops": [float(cores)]}

    shell_acts = []
    for _ in range(params["shell_steps"]):
        row = await submit(SHELL_STEP, {"cpu": 1})
        if row["status"] != "succeeded":
            raise RuntimeError(f"shell step of trajectory {index} failed: {row}")
        shell_acts.append(row["act_s"])
        await asyncio.sleep(think)
    row = await submit(
        reward_command(tests=project["tests"], rounds_per_test=project["rounds_per_test"]),
        {"cpu": {"min": 1, "max": cores}},
        elasticity={"resource": "cpu", "efficiency": params["efficiency"]},
        single_unit_duration_s=params["t1_s"],
    )
    if row["status"] != "succeeded":
        raise RuntimeError(f"suite of trajectory {index} failed: {row}")
    return {"shell": shell_acts, "suite": [row["act_s"]], "dops": [float(row["dop"])]}


_ABORT = threading.Event()  # set when one trajectory fails: the others' waits end at once
# Waits hold threads of their own: on the loop's default threads, a wave of waiting trajectories
# would leave nothing for the rest of the process.
_WAITERS = ThreadPoolExecutor(64, thread_name_prefix="bench-wait")


def _wait_ended(action_id: int) -> dict[str, Any]:
    """Block (in a worker thread) until the action ends; woken by the result notifier."""
    from apps.actions.models import TERMINAL_STATUSES, Action
    from apps.actions.notify import get_notifier

    deadline = time.monotonic() + 300
    with get_notifier().subscribe(action_id) as subscription:
        while True:
            action = Action.objects.get(pk=action_id)
            if action.status in TERMINAL_STATUSES:
                break
            if time.monotonic() > deadline or _ABORT.is_set():
                raise TimeoutError(f"action {action_id} did not end (or the run was aborted)")
            subscription.wait(1.0)
    assert action.finished_at is not None
    cores = (action.allocation or {}).get("cores") or []
    return {
        "status": action.status,
        "output": action.output,
        "act_s": (action.finished_at - action.submitted_at).total_seconds(),
        "dop": len(cores),
    }


def _plot(results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.35
    for offset, key, label in (
        (-width / 2, "act_suite_s", "reward suites"),
        (width / 2, "act_all_s", "all actions"),
    ):
        ax.bar(
            [i + offset for i in range(len(names))],
            [statistics.fmean(results[n][key]) for n in names],
            width=width,
            label=label,
        )
    ax.set_xticks(list(range(len(names))), names)
    ax.set_ylabel("mean ACT, s")
    ax.set_title("Real pytest -n {dop} suites on this machine's cores")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot_path("real_cpu"))
    plt.close(fig)


def measure(params: dict[str, Any]) -> dict[str, Any]:
    with (
        throwaway_database("real_cpu") as database,
        tempfile.TemporaryDirectory(prefix="loom-real-cpu-") as scratch,
    ):
        env = django_env(database)
        result: dict[str, Any] = run_child(
            "bench.real_cpu.run_all", env, {**params, "scratch": scratch}, timeout_s=900
        )
    return result


def _arrivals(waves: int, wave_gap_s: float = 12.0) -> list[float]:
    """Rollout waves: a burst (two at once), then a thinning tail (gaps double — the long tail of
    an RL rollout step, arl-tangram §2.3), so each wave has both contended and idle phases."""
    offsets = [0.0] + [round(0.6 * (2**i - 1), 3) for i in range(5)]
    return [wave * wave_gap_s + offset for wave in range(waves) for offset in offsets]


def run(quick: bool) -> BenchReport:
    cores = min(2, len(os.sched_getaffinity(0)))
    params: dict[str, Any] = {
        "approaches": ["elastic", "fixed-dop-1", "reservation"],
        "arrivals_s": _arrivals(waves=1 if quick else 3),
        "think_s": 0.4,
        "shell_steps": 1,
        "cores": cores,
        "suite": {"tests": SUITE_TESTS, "rounds_per_test": SUITE_ROUNDS},
        "python": sys.executable,
    }
    report = BenchReport(benchmark="real_cpu", quick=quick, params=params)
    try:
        results = measure(params)
    except Unavailable as exc:
        return report.skip(exc, "postgres_available")
    report.params["calibration"] = results.pop("calibration")
    summary = {
        name: {
            "mean_act_all_s": statistics.fmean(r["act_all_s"]),
            "mean_act_suite_s": statistics.fmean(r["act_suite_s"]),
            "mean_act_shell_s": statistics.fmean(r["act_shell_s"]),
            "makespan_s": r["makespan_s"],
            "mean_suite_dop": statistics.fmean(r["suite_dops"]),
        }
        for name, r in results.items()
    }
    report.series = {"summary": summary, "raw": results}
    elastic = summary["elastic"]["mean_act_all_s"]
    report.targets.append(
        Target.at_least(
            "fixed_dop1_over_elastic_mean_act",
            summary["fixed-dop-1"]["mean_act_all_s"] / elastic,
            1.0,
        )
    )
    report.targets.append(
        Target.at_least(
            "reservation_over_elastic_mean_act",
            summary["reservation"]["mean_act_all_s"] / elastic,
            1.0,
        )
    )
    _plot(results)
    return report
