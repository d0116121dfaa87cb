"""Heddle on the live path vs round-robin and least-load routing, and the simulator's prediction
of the same comparison (issue 18, target ``router_heddle_live``).

Processes, as in production: four emulated LLM workers (``bench._router_live_engine``: the
emulated engine of ``python -m workers.engine``, MP 1, running cap 48, step times from the
simulator's Qwen3-14B/H100 context model, slept in real time scaled by ``time_scale``), one router
(``python -m workers.router --open``) in front of them with the policy under test, and this
process as the trainer (``bench._router_live_client``), playing every trajectory of a coding
trace: generation step → tool call → next step, all trajectories started at once.

The trace: the simulator's own generator (``workers.sim.llm.trajectories``, profile ``coding``,
GRPO groups of 16), epoch 1 rolled out, epoch 0 as the recorded history the length predictor
starts from (heddle §4.1; tool times scaled like the clock, since the router measures them in
wall time). The size is the simulator's Heddle operating point: 96 trajectories per worker
over a running cap of 48 per worker (``Scenario`` defaults, after heddle §7.1), so requests
queue and scheduling matters.

Policies (``workers/router/policies.py``), all behind the same router and predictor:

- ``heddle``: PPS priority (the engine's ``priority`` field, preemptive), presorted-DP placement
  by rank with the simulator's group limit (``SETTINGS``), re-route at step start (heddle §4.2,
  §5.2–§5.3);
- ``round_robin``: every request to the next worker (the SGLang router's ``round_robin``);
- ``least_load``: every request to the worker with the fewest requests in flight through the
  router (the SGLang router's load signal is requests, not tokens). Since the engines keep a
  prefix cache (``SETTINGS``), SGLang's ``cache_aware`` routing is the baseline this list lacks:
  the live router has no such policy yet.

Predictor: the prompt-history prior fitted on epoch 0, in the router and in the simulator alike.
The progressive model (gradient-boosted trees) costs the router one scikit-learn call per
prediction on its event loop — measured and recorded in ``params`` — which, with the clock
compressed, would make the router the bottleneck; the router has no batched prediction yet.

Each repeat runs the three policies back to back (the order rotated per repeat) on the same
warm engines, a fresh router each; ratios are taken within a repeat and the median over repeats
is reported. Rollout throughput = output tokens / makespan (the last trajectory's end).

The simulator's prediction: the same trace, policies, predictor and worker model
(``bench._router_live_sim``: MP 1 workers with the same cap, each with a prefix cache per
trajectory as the emulated engines keep one — the prediction without it, what the runs before
``engine_prefix_cache`` read, is reported beside it). Targets:
the predicted ratio within 20 % of the live one, for Heddle/round-robin and Heddle/least-load;
every trajectory of every run completed.

Validity (in ``series.validity``): engine slip (wall busy time over modelled busy time), router
CPU share, client loop lag and machine CPU over each run — the live makespan means something
only if the engines kept their clock and the router and client kept up.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench._router_live_client import describe, play_trace
from bench._router_live_sim import POLICIES, simulate, summary
from bench.report import RESULTS_DIR, BenchReport, Target
from bench.router_overhead import _cpu_seconds as cpu_seconds
from bench.router_overhead import _start as start_process
from workers.algorithms.heddle.prediction import StepRecord, TrajectoryContext, TrajectoryRecord
from workers.sim.llm.experiments import prepare_workload
from workers.sim.llm.rollout import Scenario
from workers.sim.llm.trajectories import write_jsonl

NAME = "router_heddle_live"
MODEL = "loom-emulated"
PROFILE = "coding"
WORKERS = 4
RUNNING_CAP = 48  # per worker: Scenario.max_batch_per_gpu, heddle §7.1
TRAJECTORIES_PER_WORKER = 96  # Scenario.max_trajectories_per_gpu
GROUP = 16
PREDICTION_TARGET = 0.20  # |predicted ratio / live ratio − 1|, the target
# Settings changed after a result was seen; each earlier run stays in ``earlier_settings``.
# heddle_group_limit: the live DP's group limit — none in the first run, then the simulator's
# (Scenario.max_trajectories_per_gpu), so live and simulated Heddle plan alike (heddle §5.2).
# heddle_replan / heddle_moves: two runs tried a §5.3-literal live policy (the DP re-solved only
# for arrivals; a trajectory moved only when its prediction or the plan changed); the router's
# policy as built (re-solved as the active set changes, every step routed by rank) is final.
# engine_prefix_cache: the runs before it served with no prefix cache (every step prefilled its
# whole context) and read the simulator's prediction without one; the emulated engine now keeps
# SGLang's radix cache, as the simulator's workers do, and the prediction is the cached one.
SETTINGS: dict[str, Any] = {
    "heddle_group_limit": TRAJECTORIES_PER_WORKER,
    "heddle_replan": "active_set_change",
    "heddle_moves": "every_step",
    "engine_prefix_cache": True,
}
EARLIEST_SETTINGS: dict[str, Any] = {
    **SETTINGS,
    "heddle_group_limit": None,
    "engine_prefix_cache": False,
}


@dataclass(frozen=True)
class Plan:
    prompts: int
    repeats: int
    time_scale: float  # wall seconds per modelled second


FULL = Plan(prompts=WORKERS * TRAJECTORIES_PER_WORKER // GROUP, repeats=3, time_scale=0.06)
QUICK = Plan(prompts=4, repeats=1, time_scale=0.04)


def scaled_history(records: list[TrajectoryRecord], time_scale: float) -> list[TrajectoryRecord]:
    """The history as the router would have recorded it: tool times on its wall clock."""
    return [
        replace(
            r,
            steps=tuple(
                StepRecord(s.output_tokens, s.tool_seconds * time_scale, s.tool_output_tokens)
                for s in r.steps
            ),
        )
        for r in records
    ]


def progressive_predict_ms(workload: Any) -> float:
    """One prediction of the progressive model, as the router would make it (one context)."""
    record = workload.evaluation[0]
    context = TrajectoryContext(record.prompt_id, record.prompt_tokens)
    workload.progressive.predict(context)
    started = time.perf_counter()
    for _ in range(20):
        workload.progressive.predict(context)
    return (time.perf_counter() - started) / 20 * 1e3


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU jiffies of the whole machine so far (``/proc/stat``)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return float(sum(fields) - idle), float(sum(fields))


def earlier_settings(path: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The earlier settings' results kept in ``path`` (this benchmark's last report), plus that
    report itself when it was a full run under other settings."""
    if not path.exists():
        return []
    previous = json.loads(path.read_text())
    carried: list[dict[str, Any]] = list(previous["series"].get("earlier_settings", []))
    # The first full run predates the settings record: its live DP had no group limit. Keys
    # added later default to what the runs before them did.
    used = {**EARLIEST_SETTINGS, **previous["params"].get("settings", {})}
    for entry in carried:
        entry["settings"] = {**EARLIEST_SETTINGS, **entry["settings"]}
    if not previous["quick"] and used != settings and "live" in previous["series"]:
        series = previous["series"]
        carried.append(
            {
                "settings": used,
                "started": previous["started"],
                "live_median_ratios": series["live"]["median_ratios"],
                "live_median_makespan_model_s": series["live"]["median_makespan_model_s"],
                "live_repeat_ratios": [r["ratios"] for r in series["live"]["repeats"]],
                "heddle_requests_per_worker": [
                    r["runs"]["heddle"]["requests_per_worker"] for r in series["live"]["repeats"]
                ],
                "predicted_ratios": series["simulated"]["predicted_ratios"],
                "prediction_error": series.get("prediction_error", {}),
                "validity": series.get("validity", {}),
                "targets": previous["targets"],
            }
        )
    return carried


async def _get_json(url: str, path: str) -> Any:
    from workers.router.upstream import Upstream

    upstream = Upstream(url)
    try:
        response = await upstream.request("GET", path)
        return json.loads(await response.read())
    finally:
        await upstream.close()


async def _engine_stats(urls: list[str]) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(_get_json(u, "/bench/engine_stats") for u in urls)))


def _engine_slip(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[float]:
    """Per engine: wall busy time over modelled busy time (scaled), minus one."""
    slips = []
    for b, a in zip(before, after, strict=True):
        model = (a["model_busy_s"] - b["model_busy_s"]) * a["time_scale"]
        wall = a["busy_wall_s"] - b["busy_wall_s"]
        slips.append(wall / model - 1.0 if model > 0 else 0.0)
    return slips


def live_run(
    policy: str,
    records: list[TrajectoryRecord],
    engine_urls: list[str],
    history_path: Path,
    time_scale: float,
) -> dict[str, Any]:
    import uvloop

    args = ["workers.router", "--port", "0", "--open", "--policy", policy]
    args += ["--batch-limit", str(RUNNING_CAP), "--history-trace", str(history_path)]
    if SETTINGS["heddle_group_limit"] is not None:
        args += ["--group-limit", str(SETTINGS["heddle_group_limit"])]
    for url in engine_urls:
        args += ["--worker", url]
    router, router_url = start_process(args)
    try:
        engines_before = uvloop.run(_engine_stats(engine_urls))
        router_cpu = cpu_seconds(router.pid)
        busy, total = machine_busy()
        run = uvloop.run(play_trace(router_url, records, model=MODEL, time_scale=time_scale))
        busy_after, total_after = machine_busy()
        router_cpu = cpu_seconds(router.pid) - router_cpu
        time.sleep(0.05)  # the engines' last step bookkeeping
        engines_after = uvloop.run(_engine_stats(engine_urls))
        workers = uvloop.run(_get_json(router_url, "/v1/loom/workers"))["workers"]
    finally:
        router.terminate()
        router.wait()
    slips = _engine_slip(engines_before, engines_after)
    requests = sum(len(r.steps) for r in records)
    return {
        "policy": policy,
        **describe(run, time_scale),
        "router_cpu_share": router_cpu / run.makespan_s if run.makespan_s else 0.0,
        "router_cpu_us_per_request": router_cpu / requests * 1e6,
        "engine_slip": slips,
        "engine_slip_max": max(slips),
        "machine_cpu_busy_share": (busy_after - busy) / max(total_after - total, 1.0),
        "requests_per_worker": [w["requests_total"] for w in workers],
        "preemptions": sum(a["preemptions"] - b["preemptions"]
                           for a, b in zip(engines_after, engines_before, strict=True)),
        "prompt_tokens": sum(a["prompt_tokens"] - b["prompt_tokens"]
                             for a, b in zip(engines_after, engines_before, strict=True)),
        "prefill_tokens": sum(a["prefill_tokens"] - b["prefill_tokens"]
                              for a, b in zip(engines_after, engines_before, strict=True)),
        "cached_prompt_tokens": sum(a["cached_prompt_tokens"] - b["cached_prompt_tokens"]
                                    for a, b in zip(engines_after, engines_before, strict=True)),
    }  # fmt: skip


def _ratios(rows: dict[str, dict[str, Any]], key: str) -> dict[str, float]:
    heddle = rows["heddle"][key]
    return {f"heddle_over_{p}": heddle / rows[p][key] for p in POLICIES if p != "heddle"}


def _start_engines(time_scale: float) -> list[tuple[subprocess.Popen[str], str]]:
    args = ["bench._router_live_engine", "--port", "0", "--model-name", MODEL]
    args += ["--max-running-requests", str(RUNNING_CAP), "--time-scale", str(time_scale)]
    if not SETTINGS["engine_prefix_cache"]:
        args.append("--disable-radix-cache")
    return [start_process(args) for _ in range(WORKERS)]


def run(quick: bool) -> BenchReport:
    plan = QUICK if quick else FULL
    workload = prepare_workload(PROFILE, prompts=plan.prompts)
    records = workload.evaluation
    scenario = Scenario(
        gpu_budget=WORKERS,
        max_batch_per_gpu=RUNNING_CAP,
        max_trajectories_per_gpu=TRAJECTORIES_PER_WORKER,
    )
    predictor = workload.prompt_history
    history = workload.planner_history
    matched = simulate(records, scenario, predictor, history, prefix_cache=False)
    cached = simulate(records, scenario, predictor, history, prefix_cache=True)
    without_cache = {p: summary(matched[p]) for p in POLICIES}
    with_cache = {p: summary(cached[p]) for p in POLICIES}
    # the prediction the target reads: the simulated workers as the live engines serve
    simulated = with_cache if SETTINGS["engine_prefix_cache"] else without_cache
    predicted = _ratios(simulated, "throughput_tokens_per_model_s")
    report = BenchReport(
        benchmark=NAME,
        quick=quick,
        params={
            "profile": PROFILE,
            "prompts": plan.prompts,
            "trajectories": len(records),
            "steps": sum(len(r.steps) for r in records),
            "output_tokens": sum(r.total_tokens for r in records),
            "workers": WORKERS,
            "running_cap_per_worker": RUNNING_CAP,
            "time_scale_wall_per_model_s": plan.time_scale,
            "repeats": plan.repeats,
            "engine": "emulated, Qwen3-14B/H100 context model, MP 1, preemptive priority, "
            + (
                "prefix cache (SGLang's radix cache, 16-token blocks; each trajectory's prompt "
                "its own, as the simulator keys its cache per trajectory)"
                if SETTINGS["engine_prefix_cache"]
                else "no prefix cache"
            ),
            "router": "open mode (no Redis registry), a fresh router per run",
            "predictor": "prompt-history prior fitted on epoch 0 (router and simulator)",
            "progressive_predict_ms_per_call": progressive_predict_ms(workload),
            "least_load_signal": "requests in flight through the router",
            "round_robin": "per request (SGLang router round_robin)",
            "load_average_1min_at_start": os.getloadavg()[0],
            "settings": SETTINGS,
        },
    )
    report.series["earlier_settings"] = earlier_settings(RESULTS_DIR / f"{NAME}.json", SETTINGS)
    report.series["simulated"] = {
        "no_prefix_cache": without_cache,
        "with_prefix_cache": with_cache,
        "predicted_ratios": predicted,
        "predicted_ratios_without_prefix_cache": _ratios(
            without_cache, "throughput_tokens_per_model_s"
        ),
        "predicted_ratios_with_prefix_cache": _ratios(with_cache, "throughput_tokens_per_model_s"),
    }
    repeats: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loom-router-live-") as scratch:
        history_path = Path(scratch) / "history.jsonl"
        write_jsonl(scaled_history(workload.history, plan.time_scale), history_path)
        engines = _start_engines(plan.time_scale)
        try:
            urls = [url for _, url in engines]
            for repeat in range(plan.repeats):
                order = POLICIES[repeat % len(POLICIES) :] + POLICIES[: repeat % len(POLICIES)]
                rows = {p: live_run(p, records, urls, history_path, plan.time_scale) for p in order}
                repeats.append(
                    {
                        "order": list(order),
                        "runs": rows,
                        "ratios": _ratios(rows, "throughput_tokens_per_model_s"),
                    }
                )
        finally:
            for process, _ in engines:
                process.terminate()
                process.wait()
    live = {name: statistics.median(r["ratios"][name] for r in repeats) for name in predicted}
    makespans = {
        p: statistics.median(r["runs"][p]["makespan_model_s"] for r in repeats) for p in POLICIES
    }
    report.series["live"] = {
        "repeats": repeats,
        "median_ratios": live,
        "median_makespan_model_s": makespans,
        "median_throughput_tokens_per_model_s": {
            p: statistics.median(r["runs"][p]["throughput_tokens_per_model_s"] for r in repeats)
            for p in POLICIES
        },
        "median_makespan_ratios": {
            f"heddle_over_{p}": statistics.median(
                r["runs"]["heddle"]["makespan_model_s"] / r["runs"][p]["makespan_model_s"]
                for r in repeats
            )
            for p in POLICIES
            if p != "heddle"
        },
        "live_over_simulated_makespan": {
            p: makespans[p] / simulated[p]["makespan_model_s"] for p in POLICIES
        },
    }
    all_runs = [run for r in repeats for run in r["runs"].values()]
    report.series["validity"] = {
        "engine_slip_max": max(r["engine_slip_max"] for r in all_runs),
        "engine_slip_median": statistics.median(s for r in all_runs for s in r["engine_slip"]),
        "router_cpu_share_median": statistics.median(r["router_cpu_share"] for r in all_runs),
        "router_cpu_share_max": max(r["router_cpu_share"] for r in all_runs),
        "client_loop_probe_late_p50_ms_max": max(r["loop_probe_late_p50_ms"] for r in all_runs),
        "client_loop_probe_late_p99_ms_max": max(r["loop_probe_late_p99_ms"] for r in all_runs),
        "client_tool_wake_late_p50_ms_max": max(r["tool_wake_late_p50_ms"] for r in all_runs),
        "client_tool_wake_late_p99_ms_max": max(r["tool_wake_late_p99_ms"] for r in all_runs),
        "machine_cpu_busy_share_max": max(r["machine_cpu_busy_share"] for r in all_runs),
    }
    for name, live_ratio in live.items():
        error = abs(predicted[name] / live_ratio - 1.0)
        report.series.setdefault("prediction_error", {})[name] = error
        report.targets.append(Target.at_most(f"prediction_error_{name}", error, PREDICTION_TARGET))
    report.targets.append(
        Target.is_true(
            "all_trajectories_completed",
            all(r["completed"] == r["trajectories"] for r in all_runs),
        )
    )
    return report
