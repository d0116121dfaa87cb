"""ARTOS buffer logic (artos §4.2–§4.3): trigger primitives, samplers, capacity and eviction, and
the workload monitor that drives actor pre-warming.

Pure: plain numbers, numpy arrays and a read-only buffer view in, decisions out; no I/O and no
clock (time is an argument).
"""

from workers.algorithms.artos.capacity import (
    BufferFullError,
    CapacityError,
    EvictionPolicy,
    FifoEviction,
    KeepUnsampled,
    ReservoirEviction,
    eviction_policy,
)
from workers.algorithms.artos.monitor import MonitorError, MonitorReading, WorkloadMonitor
from workers.algorithms.artos.samplers import (
    FifoPerActor,
    NStepReturns,
    PrioritisedBatch,
    PrioritisedSampler,
    SamplerError,
    SumTree,
    full_batch,
    n_step_returns,
    uniform,
)
from workers.algorithms.artos.triggers import (
    BufferEvent,
    BufferView,
    DataKeyTrigger,
    EventKind,
    Firing,
    ObjectKeyTrigger,
    TimeTrigger,
    TransferTrigger,
    Trigger,
    TriggerError,
)

__all__ = [
    "BufferEvent",
    "BufferFullError",
    "BufferView",
    "CapacityError",
    "DataKeyTrigger",
    "EventKind",
    "EvictionPolicy",
    "FifoEviction",
    "FifoPerActor",
    "Firing",
    "KeepUnsampled",
    "MonitorError",
    "MonitorReading",
    "NStepReturns",
    "ObjectKeyTrigger",
    "PrioritisedBatch",
    "PrioritisedSampler",
    "ReservoirEviction",
    "SamplerError",
    "SumTree",
    "TimeTrigger",
    "TransferTrigger",
    "Trigger",
    "TriggerError",
    "WorkloadMonitor",
    "eviction_policy",
    "full_batch",
    "n_step_returns",
    "uniform",
]
