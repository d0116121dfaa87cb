"""The simulator's side of ``gpu_live``: the trace's requests, the costs the agent reported, and
the predictions of both approaches from them (``TangramSimulation`` for EOE, each service's FIFO
queue for isolated), so that the live runs and their predictions share one description."""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from workers.algorithms.tangram import ElasticScheduler, GpuTopology, ResourceDemand
from workers.algorithms.tangram.topology.gpu import GpuServiceSpec
from workers.sim.tangram.runner import TangramSimulation
from workers.sim.tangram.trace import ActionTemplate, Step, Trace, TrajectoryTrace

SERVICES = 6
EOE_DEVICES = 4


class Hosted(Protocol):
    """A service as the predictions see it: the memory its weights take."""

    host_mb: float


@dataclass(frozen=True)
class Arrival:
    at: float
    service: str
    action_id: str


def device_memory_mb(services: Mapping[str, Hosted]) -> int:
    """Room for one model per device (EOE must evict to switch a device's service)."""
    largest = max(service.host_mb for service in services.values())
    return int(largest * 1.5) + 1


def eoe_topology(
    services: Mapping[str, Hosted], memory_mb: int, restore_s: dict[str, float]
) -> GpuTopology:
    specs = {name: GpuServiceSpec(name, weights_mb=s.host_mb) for name, s in services.items()}
    return GpuTopology(
        ["live"],
        specs,
        gpus_per_node=EOE_DEVICES,
        gpu_memory_mb=float(memory_mb),
        loader=lambda spec, gpus: restore_s[spec.name],
    )


@dataclass(frozen=True)
class Reported:
    """One live request as the agent reported it: the calibration's raw material."""

    service: str
    restored: bool
    queue_s: float
    restore_s: float
    execute_s: float


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


def prediction_error(predicted: list[float], live: list[float]) -> dict[str, Any]:
    """Signed relative errors of predicted mean ACTs against the live ones, run by run, and of
    the median prediction against the median live figure (the one a target reads)."""
    if not live or len(predicted) != len(live):
        raise ValueError("predicted, live: one prediction per live run is needed")
    return {
        "of_medians": statistics.median(predicted) / statistics.median(live) - 1.0,
        "per_run": [p / x - 1.0 for p, x in zip(predicted, live, strict=True)],
    }


def costs_with(
    prof: dict[str, dict[str, float]], calibration: dict[str, dict[str, float]] | None
) -> dict[str, dict[str, float]]:
    """The profile's costs, overridden by a calibration's where it measured them."""
    if calibration is None:
        return prof
    return {name: prof[name] | calibration.get(name, {}) for name in prof}


def predict_eoe(
    services: Mapping[str, Hosted],
    arrivals: list[Arrival],
    costs: dict[str, dict[str, float]],
    slots: int | None = None,
    admission: int | None = None,
) -> dict[str, Any]:
    """The simulator on the same trace: each request a one-step trajectory at its arrival."""
    memory = device_memory_mb(services)
    topology = eoe_topology(services, memory, {n: p["restore_s"] for n, p in costs.items()})
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
        admission={"gpu": admission} if admission else {},
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
