"""Resource topologies behind one interface (arl-tangram §5): basic, CPU, GPU."""

from workers.algorithms.tangram.topology.base import (
    POOL_GROUP,
    Accommodation,
    Allocation,
    Blocked,
    Placement,
    Topology,
    WaitReason,
)
from workers.algorithms.tangram.topology.basic import BasicLimit, BasicTopology
from workers.algorithms.tangram.topology.cpu import CpuNodeSpec, CpuTopology
from workers.algorithms.tangram.topology.gpu import GpuServiceSpec, GpuTopology

__all__ = [
    "POOL_GROUP",
    "Accommodation",
    "Allocation",
    "BasicLimit",
    "BasicTopology",
    "Blocked",
    "CpuNodeSpec",
    "CpuTopology",
    "GpuServiceSpec",
    "GpuTopology",
    "Placement",
    "Topology",
    "WaitReason",
]
