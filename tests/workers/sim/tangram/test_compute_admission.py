"""The simulator's admission limit: actions held back before the scheduler sees them, in arrival
order, while the pool has that many unfinished; their ACT still counts from arrival."""

from __future__ import annotations

import pytest

from workers.algorithms.tangram import ElasticScheduler, GpuTopology, ResourceDemand
from workers.algorithms.tangram.topology.gpu import GpuServiceSpec
from workers.sim.tangram.runner import TangramSimulation
from workers.sim.tangram.trace import ActionTemplate, Step, Trace, TrajectoryTrace

RESTORE_S = 0.5


def burst(n: int, service: str = "rm") -> Trace:
    """``n`` one-step requests of ``service``, 1 s each on one GPU, arriving 1 ms apart."""
    template = ActionTemplate(
        tool=service,
        kind="reward",
        t1=1.0,
        resources={"gpu": ResourceDemand.exactly(1)},
        profiled=True,
        key_resource="gpu",
        service=service,
    )
    return Trace(
        "burst",
        [TrajectoryTrace(f"r{k}", service, 0.001 * k, (Step(action=template),)) for k in range(n)],
    )


def scheduler() -> ElasticScheduler:
    topology = GpuTopology(
        ["node"],
        {"rm": GpuServiceSpec("rm", weights_mb=10.0)},
        gpus_per_node=4,
        gpu_memory_mb=15.0,
        loader=lambda spec, gpus: RESTORE_S,
    )
    return ElasticScheduler(topology)


def test_without_admission_a_burst_restores_onto_every_idle_device() -> None:
    gpu = scheduler()
    result = TangramSimulation(burst(4), {"gpu": gpu}).run()
    assert gpu.topology.loads == 4  # type: ignore[attr-defined]
    assert result.makespan == pytest.approx(1.5 + 0.003)


def test_admission_places_each_request_when_it_may_run_on_the_warm_device() -> None:
    gpu = scheduler()
    result = TangramSimulation(burst(3), {"gpu": gpu}, admission={"gpu": 1}).run()
    assert gpu.topology.loads == 1  # type: ignore[attr-defined]
    finished = sorted(record.finished for record in result.records)
    assert finished == pytest.approx([1.5, 2.5, 3.5])
    # held back requests count their wait: ACT from arrival, not from admission
    acts = sorted(record.finished - record.submitted for record in result.records)
    assert acts == pytest.approx([1.5, 2.5 - 0.001, 3.5 - 0.002])


def test_admission_and_compute_slots_need_one_action() -> None:
    with pytest.raises(ValueError, match="admission"):
        TangramSimulation(burst(1), {"gpu": scheduler()}, admission={"gpu": 0})
