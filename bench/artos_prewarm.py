"""ARTOS elastic actors and pre-warming (artos §4.3, §6.3): how long an invocation waits for its
actor to start, with pre-warming from the workload monitor, with a zygote fork on demand, and
from a cold start; all in one run.

The workload is the on-policy loop of ``artos_ppo`` wired with ARTOS triggers: publishing
``model_param`` invokes the actors (ObjectKeyTrigger), each elastic actor (the PPO actor
program of ``workers.actors.gym_programs`` on CartPole) samples ``steps`` steps into the central
buffer and checkpoints, the full batch fires the learner (DataKeyTrigger(n=actors)), which runs
the one PPO update (``workers.algorithms.artos.ppo``) and publishes the next parameters.
``prewarm`` arms the monitor-driven pre-warmer at each iteration's start; ``on_demand`` forks
each actor from the zygote when invoked; ``cold`` starts a fresh interpreter that imports and
prepares the program and restores the actor (what a process manager without CRIU and without a
zygote pays), measured ``cold_starts`` times.

Targets: the share of invocations that wait < 50 ms once the monitor declared stability
(paper 92.75 %), and cold start / zygote restore (request to ready, medians).
"""

from __future__ import annotations

import os
import queue
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._artos_run import LEARNER_THREADS
from bench.report import BenchReport, Target
from workers.actors.pool import ActorPool, Invocation, cold_start_seconds
from workers.actors.prewarm import Prewarmer
from workers.actors.program import load_program
from workers.algorithms.artos import DataKeyTrigger, Firing, ObjectKeyTrigger, WorkloadMonitor
from workers.algorithms.artos.ppo import PPOLearner
from workers.buffers.passers import DirectPasser, QueuePasser
from workers.buffers.schema import Schema
from workers.buffers.service import BufferServer
from workers.buffers.store import ExperienceBuffer

NAME = "artos_prewarm"
PROGRAM = "workers.actors.gym_programs:ppo"
WAIT_BOUND_S = 0.050


def _mean_episode_return(batch: dict[str, np.ndarray]) -> float | None:
    ended = batch["episode_return"][~np.isnan(batch["episode_return"])]
    return float(ended.mean()) if len(ended) else None


def run_mode(
    mode: str, actors: list[str], steps: int, iterations: int, workdir: Path
) -> dict[str, Any]:
    program: Any = load_program(PROGRAM)
    schema = Schema(program.schema_fields())
    buffer = ExperienceBuffer("rollout", schema, len(actors) * steps, eviction="keep_unsampled")
    data_ready: queue.Queue[Firing] = queue.Queue()
    buffer.bind("learn", DataKeyTrigger(len(actors), steps, schema.keys), QueuePasser(data_ready))
    learner = PPOLearner(program.config)
    with BufferServer([buffer]) as server:
        pool = ActorPool(
            PROGRAM,
            actors,
            workdir / mode,
            steps,
            sink={"address": server.address, "buffer": "rollout"},
            params={"address": server.address, "buffer": "rollout", "key": "model_param"},
        )
        prepare_s = pool.start()
        invoked: queue.Queue[float] = queue.Queue()

        def invoke_actors(firing: dict[str, Any]) -> None:  # Table 3: actor invocation
            invoked.put(time.monotonic())
            for actor in actors:
                pool.invoke(actor)

        buffer.bind("invoke", ObjectKeyTrigger("model_param"), DirectPasser(invoke_actors))
        prewarmer = Prewarmer(pool, WorkloadMonitor(window=5, stability=0.2))
        rows = []
        try:
            buffer.put_object("model_param", learner.params())
            for iteration in range(iterations):
                started = invoked.get(timeout=120)
                armed = prewarmer.arm(started, actors) if mode == "prewarm" else None
                firing = data_ready.get(timeout=120)
                results: dict[str, Invocation] = pool.wait(actors)
                slices = dict(sorted(firing["actors"].items()))  # actor order: GAE segments
                batch = buffer.gather(slices, consume=True)
                learner.update(batch, len(slices))
                learner_fin = time.monotonic() - started
                reading = prewarmer.record(results.values(), learner_fin)
                rows.append(
                    {
                        "iteration": iteration,
                        "armed": armed is not None,
                        "stable_after": reading.stable,
                        "threshold_s": reading.prewarm_threshold,
                        "learner_fin_s": learner_fin,
                        "mean_episode_return": _mean_episode_return(batch),
                        "waits_s": [results[a].startup_wait_s for a in actors],
                        "prewarmed": [results[a].prewarmed for a in actors],
                        "restore_s": [results[a].restore_s for a in actors],
                        "fork_to_ready_s": [
                            (results[a].ready_at or 0.0) - results[a].requested_at for a in actors
                        ],
                    }
                )
                if iteration + 1 < iterations:
                    buffer.put_object("model_param", learner.params())
        finally:
            prewarmer.cancel()
            pool.close()
    return {"prepare_s": prepare_s, "iterations": rows}


def _waits(rows: list[dict[str, Any]], when: str = "all") -> list[float]:
    """Start-up waits of the invocations of some iterations.

    ``stable``: the monitor was stable when the iteration was invoked (its pre-warmer was armed
    then, for the next iteration). ``eligible``: the previous iteration armed a pre-warm, so
    these invocations could find their actor warm. ``all``: every invocation.
    """
    chosen = []
    for index, row in enumerate(rows):
        if (
            when == "all"
            or (when == "stable" and row["armed"])
            or (when == "eligible" and index > 0 and rows[index - 1]["armed"])
        ):
            chosen += row["waits_s"]
    return chosen


def run(quick: bool = False) -> BenchReport:
    params: dict[str, Any] = {
        # two actors per core of this 2-core machine; the first full configuration (8 actors,
        # 30 iterations) is kept in results/artos_prewarm_8actors.json, the last run with the
        # small CartPole policy and a learner of this bench's own in artos_prewarm_prev.json
        "actors": 4,
        "steps": 128 if quick else 256,
        "iterations": 14 if quick else 40,
        "learner": "workers.algorithms.artos.ppo.PPOLearner (PPOConfig defaults)",
        # one intra-op thread, as artos_ppo's learners; the first run with torch's default
        # (one per core, contending with the actors) is kept in
        # results/artos_prewarm_learner_threads_default.json: its learner times never held
        # the monitor's stability band
        "learner_threads": LEARNER_THREADS,
        "cold_starts": 3 if quick else 7,
        "window": 5,
        "stability": 0.2,
        "wait_bound_ms": WAIT_BOUND_S * 1000,
        "cores": sorted(os.sched_getaffinity(0)),
        "load_average_at_start": os.getloadavg()[0],
    }
    torch.set_num_threads(LEARNER_THREADS)
    actors = [f"actor{i}" for i in range(params["actors"])]
    series: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="artos-prewarm-") as directory:
        workdir = Path(directory)
        for mode in ("on_demand", "prewarm"):
            series[mode] = run_mode(
                mode,
                actors,
                params["steps"],
                params["iterations"],
                workdir,
            )
        cold = [
            cold_start_seconds(PROGRAM, actors[0], workdir / "prewarm")
            for _ in range(params["cold_starts"])
        ]
    series["cold"] = cold
    prewarm_rows = series["prewarm"]["iterations"]
    after_stable = _waits(prewarm_rows, "stable")
    eligible = _waits(prewarm_rows, "eligible")
    on_demand = _waits(series["on_demand"]["iterations"])
    zygote_startup = statistics.median(on_demand)
    cold_startup = statistics.median(c["startup_s"] for c in cold)
    share = float(np.mean([w < WAIT_BOUND_S for w in after_stable])) if after_stable else 0.0
    series["summary"] = {
        "invocations_after_stable": len(after_stable),
        "share_under_bound_after_stable": share,
        "share_under_bound_on_demand": float(np.mean([w < WAIT_BOUND_S for w in on_demand])),
        "invocations_prewarm_eligible": len(eligible),
        "share_under_bound_prewarm_eligible": float(np.mean([w < WAIT_BOUND_S for w in eligible]))
        if eligible
        else None,
        "stable_iterations": sum(row["armed"] for row in prewarm_rows),
        "median_wait_prewarm_after_stable_ms": statistics.median(after_stable) * 1000
        if after_stable
        else None,
        "p90_wait_prewarm_after_stable_ms": float(np.percentile(after_stable, 90)) * 1000
        if after_stable
        else None,
        "median_wait_on_demand_ms": zygote_startup * 1000,
        "median_cold_start_ms": cold_startup * 1000,
        "first_stable_iteration": next(
            (row["iteration"] for row in prewarm_rows if row["armed"]), None
        ),
    }
    report = BenchReport(NAME, quick, params=params, series=series)
    report.targets.append(Target.at_least("share_wait_under_50ms_after_stable", share, 0.9))
    report.targets.append(
        Target.at_least("cold_start_over_zygote_restore", cold_startup / zygote_startup, 10.0)
    )
    return report
