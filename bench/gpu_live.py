"""Live GPU services with evict-on-execution on CPU stand-in devices (arl-tangram §5.3, §6.3).

Six PyTorch reward models (random-weight Llama checkpoints made here, real weights loaded,
restored and evicted) receive bursty requests. Two approaches serve the same trace, in the same
run, alternating, several times:

- **EOE**: 4 devices shared through the GPU agent's ``ServiceCache``; each request gets a device
  from the production ``ElasticScheduler`` over the simulator's ``GpuTopology`` (buddy chunks,
  cached-service preference, LRU eviction), and the cache restores the service there from its
  host copy before running it (evicting the least recently used one: a device holds one model).
- **isolated**: one device per service (6 devices), each model resident from the start, its
  requests run in arrival order on its own device (the paper's task-level isolated services).

Figures: mean ACT (arrival to result) and device-seconds held (devices × makespan), medians over
the repeats.

The stand-in devices share this machine's cores (2 here, also used by other processes): a
request on one slows down every other running at the same time, so spreading a burst over
several stand-ins runs it no faster and finishes every request of it late together. Each
approach therefore runs in two forms: with the cache's ``compute_slots`` (as many requests
compute at once as there are cores, the rest wait in arrival order holding their device) and
without (``*_ungated``: every busy stand-in time-slices the cores). The isolated baseline is the
better of its two forms.

The simulator predicts each form on the same trace. Its costs come from a calibration step in
the same run: one untimed run of each form, whose agent-reported execute and restore seconds per
service become the costs of that form's timed runs (the live scheduler's estimates) and of its
prediction (``TangramSimulation`` with the same scheduler, topology and compute slots for EOE;
each service's FIFO queue, then the slots, for isolated). The earlier prediction from the idle
profile with independent devices is kept beside it, and a replay of each timed run with its own
reported costs (a target too) shows how much of the error is the load drifting between runs.
Torch runs one thread per request.
"""

from __future__ import annotations

import asyncio
import heapq
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.report import BenchReport, Target
from workers.agents.gpu.backend import chunk_of
from workers.agents.gpu.cache import ServiceCache
from workers.agents.gpu.checkpoints import create_checkpoint
from workers.agents.gpu.devices import compute_slots, discover_devices
from workers.agents.gpu.torch_backend import TorchService
from workers.algorithms.tangram import ActionSpec, ElasticScheduler, GpuTopology, ResourceDemand
from workers.algorithms.tangram.topology.gpu import GpuServiceSpec
from workers.sim.tangram.runner import TangramSimulation
from workers.sim.tangram.trace import ActionTemplate, Step, Trace, TrajectoryTrace

SERVICES = 6
EOE_DEVICES = 4
MODEL = {"hidden_size": 512, "layers": 4, "heads": 8, "vocab_size": 8192}
REQUEST = {"input_ids": [list(range(1, 65))] * 4}  # 4 sequences of 64 tokens per request


@dataclass(frozen=True)
class Params:
    bursts_per_service: int
    requests_per_burst: int
    window_s: float
    burst_spread_s: float
    repeats: int
    seed: int = 0


FULL = Params(bursts_per_service=3, requests_per_burst=4, window_s=24.0, burst_spread_s=0.3,
              repeats=3)  # fmt: skip
QUICK = Params(bursts_per_service=2, requests_per_burst=3, window_s=8.0, burst_spread_s=0.3,
               repeats=1)  # fmt: skip


@dataclass(frozen=True)
class Arrival:
    at: float
    service: str
    action_id: str


def bursty_arrivals(params: Params) -> list[Arrival]:
    """Each service's requests come in bursts at random times (§2.3's bursty invocations)."""
    rng = random.Random(params.seed)
    arrivals = []
    for index in range(SERVICES):
        service = f"rm-{index}"
        for burst in range(params.bursts_per_service):
            start = rng.uniform(0.0, params.window_s)
            for k in range(params.requests_per_burst):
                at = start + rng.uniform(0.0, params.burst_spread_s)
                arrivals.append(Arrival(at, service, f"{service}/{burst}/{k}"))
    return sorted(arrivals, key=lambda a: (a.at, a.action_id))


def make_services(root: Path) -> dict[str, TorchService]:
    return {
        f"rm-{i}": TorchService(
            f"rm-{i}",
            create_checkpoint(root / f"rm-{i}", "reward", seed=i, **MODEL),
            "reward",
        )
        for i in range(SERVICES)
    }


async def profile(services: dict[str, TorchService]) -> dict[str, dict[str, float]]:
    """Restore and execute seconds per service, one at a time on an idle device: the fastest of
    five, the device's own speed with the least interference from whatever else shares this
    machine's cores (an earlier version took the median of three: its result is kept in
    ``results/gpu_live_median_profile.json``)."""
    chunk = chunk_of(discover_devices(1, 1_000_000), [0])
    out = {}
    for name, service in services.items():
        restores, executes = [], []
        for _ in range(5):
            began = time.perf_counter()
            await service.restore(chunk)
            restored = time.perf_counter()
            await service.execute(chunk, REQUEST, 0)
            restores.append(restored - began)
            executes.append(time.perf_counter() - restored)
            await service.evict(chunk)
        out[name] = {
            "restore_s": min(restores),
            "execute_s": min(executes),
            "host_mb": service.host_mb,
        }
    return out


async def _sleep_until(clock: Callable[[], float], at: float) -> None:
    delay = at - clock()
    if delay > 0:
        await asyncio.sleep(delay)


def _device_memory_mb(services: dict[str, TorchService]) -> int:
    """Room for one model per device (EOE must evict to switch a device's service)."""
    largest = max(service.host_mb for service in services.values())
    return int(largest * 1.5) + 1


def _topology(
    services: dict[str, TorchService], memory_mb: int, restore_s: dict[str, float]
) -> GpuTopology:
    specs = {name: GpuServiceSpec(name, weights_mb=s.host_mb) for name, s in services.items()}
    return GpuTopology(
        ["live"],
        specs,
        gpus_per_node=EOE_DEVICES,
        gpu_memory_mb=float(memory_mb),
        loader=lambda spec, gpus: restore_s[spec.name],
    )


def _spec(arrival: Arrival, t1: float) -> ActionSpec:
    return ActionSpec(
        action_id=arrival.action_id,
        resources={"gpu": ResourceDemand.exactly(1)},
        key_resource="gpu",
        t1=t1,
        service=arrival.service,
    )


@dataclass(frozen=True)
class Reported:
    """One live request as the agent reported it: the calibration's raw material."""

    service: str
    restored: bool
    queue_s: float
    restore_s: float
    execute_s: float


async def run_eoe(
    services: dict[str, TorchService],
    arrivals: list[Arrival],
    prof: dict[str, dict[str, float]],
    slots: int | None,
) -> dict[str, Any]:
    memory = _device_memory_mb(services)
    cache = ServiceCache(discover_devices(EOE_DEVICES, memory), services, compute_slots=slots)
    cache.prepared = True  # the host copies are loaded already (profile)
    scheduler = ElasticScheduler(
        _topology(services, memory, {n: p["restore_s"] for n, p in prof.items()})
    )
    origin = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - origin

    finished: dict[str, float] = {}
    served: list[Reported] = []
    tasks: set[asyncio.Task[None]] = set()

    def schedule() -> None:
        for assignment in scheduler.schedule(clock()):
            task = asyncio.create_task(execute(assignment.action_id, assignment.gpu_ids))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def execute(action_id: str, gpus: tuple[int, ...]) -> None:
        service = by_id[action_id].service
        result = await cache.serve(service, gpus, REQUEST)
        served.append(_served(service, result))
        finished[action_id] = clock()
        scheduler.complete(action_id, clock())
        schedule()

    by_id = {arrival.action_id: arrival for arrival in arrivals}
    for arrival in arrivals:
        await _sleep_until(clock, arrival.at)
        scheduler.submit(_spec(arrival, prof[arrival.service]["execute_s"]), clock())
        schedule()
    while len(finished) < len(arrivals):
        await asyncio.sleep(0.01)
    await cache.evict_all()  # the host copies stay for the next run
    return _summary(arrivals, finished, EOE_DEVICES, served)


def _served(service: str, result: Any) -> Reported:
    t = result.timings
    restored = any(event.kind == "restore" for event in result.events)
    return Reported(service, restored, t.queue_s, t.restore_s, t.execute_s)


async def run_isolated(
    services: dict[str, TorchService], arrivals: list[Arrival], slots: int | None
) -> dict[str, Any]:
    names = sorted(services)
    devices = discover_devices(SERVICES, _device_memory_mb(services))
    cache = ServiceCache(devices, services, compute_slots=slots)
    cache.prepared = True
    home = {name: index for index, name in enumerate(names)}
    for name in names:  # resident from the start (one warm-up request): never restored again
        await cache.serve(name, [home[name]], REQUEST)
    origin = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - origin

    finished: dict[str, float] = {}
    served: list[Reported] = []

    async def execute(arrival: Arrival) -> None:
        result = await cache.serve(arrival.service, [home[arrival.service]], REQUEST)
        served.append(_served(arrival.service, result))
        finished[arrival.action_id] = clock()

    tasks = []
    for arrival in arrivals:
        await _sleep_until(clock, arrival.at)
        tasks.append(asyncio.create_task(execute(arrival)))  # queues on its device's lock
    await asyncio.gather(*tasks)
    await cache.evict_all()  # the host copies stay for the next run
    return _summary(arrivals, finished, SERVICES, served)


def _summary(
    arrivals: list[Arrival], finished: dict[str, float], devices: int, served: list[Reported]
) -> dict[str, Any]:
    acts = [finished[a.action_id] - a.at for a in arrivals]
    makespan = max(finished.values())
    return {
        "requests": len(arrivals),
        "mean_act_s": statistics.fmean(acts),
        "p99_act_s": sorted(acts)[min(len(acts) - 1, int(0.99 * len(acts)))],
        "makespan_s": makespan,
        "devices": devices,
        "device_seconds": devices * makespan,
        "restores": sum(1 for s in served if s.restored),
        # where the agent's time went (queue: waiting for the device or a compute slot)
        "mean_agent_queue_s": statistics.fmean(s.queue_s for s in served),
        "mean_restore_s": statistics.fmean(s.restore_s for s in served),
        "mean_execute_s": statistics.fmean(s.execute_s for s in served),
        "calibration": calibrate(served),
    }


def calibrate(served: list[Reported]) -> dict[str, dict[str, float]]:
    """Per service, the agent's own mean execute seconds and mean seconds per restore, as the
    simulator's costs (a restore that never happened falls back to the idle profile's)."""
    out: dict[str, dict[str, float]] = {}
    for service in sorted({s.service for s in served}):
        mine = [s for s in served if s.service == service]
        restores = [s.restore_s for s in mine if s.restored]
        out[service] = {"execute_s": statistics.fmean(s.execute_s for s in mine)}
        if restores:
            out[service]["restore_s"] = statistics.fmean(restores)
    return out


def _costs(
    prof: dict[str, dict[str, float]], calibration: dict[str, dict[str, float]] | None
) -> dict[str, dict[str, float]]:
    """The profile's costs, overridden by a calibration's where it measured them."""
    if calibration is None:
        return prof
    return {name: prof[name] | calibration.get(name, {}) for name in prof}


def predict_eoe(
    services: dict[str, TorchService],
    arrivals: list[Arrival],
    costs: dict[str, dict[str, float]],
    slots: int | None = None,
) -> dict[str, Any]:
    """The simulator on the same trace: each request a one-step trajectory at its arrival."""
    memory = _device_memory_mb(services)
    topology = _topology(services, memory, {n: p["restore_s"] for n, p in costs.items()})
    trajectories = [
        TrajectoryTrace(
            trajectory_id=a.action_id,
            task=a.service,
            start=a.at,
            steps=(
                Step(
                    action=ActionTemplate(
                        tool=a.service,
                        kind="reward",
                        t1=costs[a.service]["execute_s"],
                        resources={"gpu": ResourceDemand.exactly(1)},
                        profiled=True,
                        key_resource="gpu",
                        service=a.service,
                    )
                ),
            ),
        )
        for a in arrivals
    ]
    result = TangramSimulation(
        Trace("gpu_live", trajectories),
        {"gpu": ElasticScheduler(topology)},
        compute_slots={"gpu": slots} if slots else {},
    ).run()
    return {
        "mean_act_s": result.mean_act(),
        "makespan_s": result.makespan,
        "device_seconds": EOE_DEVICES * result.makespan,
        "restores": topology.loads,
    }


def predict_isolated(
    arrivals: list[Arrival], costs: dict[str, dict[str, float]], slots: int | None = None
) -> dict[str, Any]:
    """Each service's FIFO queue on its own device, replayed with the given execute times; with
    ``slots``, a request whose device is free then waits, in arrival order, for a compute slot
    (the cache's rule)."""
    queues: dict[str, list[Arrival]] = {}
    for arrival in arrivals:
        queues.setdefault(arrival.service, []).append(arrival)
    heads = [(q[0].at, service, 0) for service, q in queues.items()]
    heapq.heapify(heads)
    free_slots = [0.0] * (slots or len(arrivals))
    acts, ends = [], []
    while heads:  # the earliest request ready on its device takes the earliest free slot
        ready, service, index = heapq.heappop(heads)
        arrival = queues[service][index]
        start = max(ready, heapq.heappop(free_slots))
        end = start + costs[service]["execute_s"]
        heapq.heappush(free_slots, end)
        acts.append(end - arrival.at)
        ends.append(end)
        if index + 1 < len(queues[service]):
            following = queues[service][index + 1]
            heapq.heappush(heads, (max(following.at, end), service, index + 1))
    return {
        "mean_act_s": statistics.fmean(acts),
        "makespan_s": max(ends),
        "device_seconds": SERVICES * max(ends),
    }


VARIANTS = {  # name: (approach, compute slots?)
    "eoe": ("eoe", True),
    "isolated": ("isolated", True),
    "eoe_ungated": ("eoe", False),
    "isolated_ungated": ("isolated", False),
}


def _form(variant: str) -> tuple[str, int | None]:
    """The variant's approach and compute slots (the agent's rule for its stand-ins)."""
    approach, gated = VARIANTS[variant]
    count = EOE_DEVICES if approach == "eoe" else SERVICES
    return approach, compute_slots(discover_devices(count, 1)) if gated else None


async def _run_variant(
    variant: str,
    services: dict[str, TorchService],
    arrivals: list[Arrival],
    costs: dict[str, dict[str, float]],
) -> dict[str, Any]:
    approach, slots = _form(variant)
    if approach == "eoe":
        return await run_eoe(services, arrivals, costs, slots)
    return await run_isolated(services, arrivals, slots)


def _predict(
    variant: str,
    services: dict[str, TorchService],
    arrivals: list[Arrival],
    costs: dict[str, dict[str, float]],
) -> dict[str, Any]:
    approach, slots = _form(variant)
    if approach == "eoe":
        return predict_eoe(services, arrivals, costs, slots)
    return predict_isolated(arrivals, costs, slots)


async def _run(quick: bool) -> BenchReport:
    params = QUICK if quick else FULL
    report = BenchReport("gpu_live", quick=quick)
    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    arrivals = bursty_arrivals(params)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gpu-live-") as root:
        services = make_services(Path(root))
        for service in services.values():
            await service.prepare()
        prof = await profile(services)
        # Calibration: one untimed run of each variant with the idle profile as the scheduler's
        # estimates; the agent's own execute and restore seconds in it become the costs the
        # timed runs' scheduler and the simulator use (never the ACT the runs measure).
        calibration_runs = {v: await _run_variant(v, services, arrivals, prof) for v in VARIANTS}
        costs = {v: _costs(prof, run["calibration"]) for v, run in calibration_runs.items()}
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
        for _ in range(params.repeats):  # alternating, so every variant sees the same load
            for variant in VARIANTS:
                runs[variant].append(
                    await _run_variant(variant, services, arrivals, costs[variant])
                )
        prediction = {v: _predict(v, services, arrivals, costs[v]) for v in VARIANTS}
        # each timed run replayed with its own agent-reported costs: the simulator's queueing
        # and placement, without the drift of the machine's load since the calibration run
        replayed = {
            v: [
                _predict(v, services, arrivals, _costs(prof, run["calibration"]))["mean_act_s"]
                for run in runs[v]
            ]
            for v in VARIANTS
        }
        idle_prediction = {  # the earlier model: idle-profile costs, independent devices
            "eoe": predict_eoe(services, arrivals, prof),
            "isolated": predict_isolated(arrivals, prof),
        }
        host_mb = next(iter(services.values())).host_mb
        memory = _device_memory_mb(services)
    load_after = os.getloadavg()

    def median(variant: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[variant])

    medians = {
        v: {k: median(v, k) for k in ("mean_act_s", "device_seconds", "restores")} for v in VARIANTS
    }
    # the isolated baseline at its best: whichever of its two forms had the lower mean ACT
    baseline = min(("isolated", "isolated_ungated"), key=lambda v: medians[v]["mean_act_s"])
    eoe_act, iso_act = medians["eoe"]["mean_act_s"], medians[baseline]["mean_act_s"]
    eoe_ds, iso_ds = medians["eoe"]["device_seconds"], medians[baseline]["device_seconds"]
    report.params = {
        "services": SERVICES,
        "eoe_devices": EOE_DEVICES,
        "isolated_devices": SERVICES,
        "device_memory_mb": memory,
        "model": MODEL | {"host_mb": round(host_mb, 1)},
        "request": "4 sequences x 64 tokens, one score each",
        "trace": params.__dict__ | {"requests": len(arrivals)},
        "torch_threads_per_request": 1,
        "devices_are": "CPU stand-ins sharing this machine's cores",
        "compute_slots": {v: _form(v)[1] for v in VARIANTS},
        "variants": {v: {"approach": a, "compute_slots": g} for v, (a, g) in VARIANTS.items()},
        "load_average_before": load_before,
        "load_average_after": load_after,
    }
    error = {v: prediction[v]["mean_act_s"] / medians[v]["mean_act_s"] - 1.0 for v in VARIANTS}
    own = {v: statistics.median(replayed[v]) / medians[v]["mean_act_s"] - 1.0 for v in VARIANTS}
    report.series = {
        "profile": prof,
        "calibration_runs": calibration_runs,
        "costs": costs,
        "runs": runs,
        "median": medians,
        "isolated_baseline": baseline,
        "simulator": prediction,
        "simulator_signed_error": error,
        "simulator_replay_of_each_run_mean_act_s": replayed,
        "simulator_replay_signed_error": own,
        "simulator_idle_profile": idle_prediction,
        "simulator_idle_profile_signed_error": {
            "eoe": idle_prediction["eoe"]["mean_act_s"] / medians["eoe_ungated"]["mean_act_s"] - 1,
            "isolated": idle_prediction["isolated"]["mean_act_s"]
            / medians["isolated_ungated"]["mean_act_s"]
            - 1,
        },
    }
    report.targets = [
        Target.at_least("isolated_over_eoe_mean_act", iso_act / eoe_act, 1.0),
        Target.at_least("isolated_over_eoe_device_seconds", iso_ds / eoe_ds, 1.0),
        Target.at_most("simulator_eoe_mean_act_error", abs(error["eoe"]), 0.2),
        Target.at_most("simulator_isolated_mean_act_error", abs(error[baseline]), 0.2),
        # the same model given each timed run's own agent-reported costs (not its ACT)
        Target.at_most("simulator_eoe_mean_act_error_own_costs", abs(own["eoe"]), 0.2),
        Target.at_most("simulator_isolated_mean_act_error_own_costs", abs(own[baseline]), 0.2),
    ]
    return report


def run(quick: bool = False) -> BenchReport:
    return asyncio.run(_run(quick))
