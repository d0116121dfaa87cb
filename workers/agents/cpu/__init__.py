"""CPU agent: runs shell actions on allocated cores (arl-tangram §5.2, allocate-on-execution).

Backends: ``LocalBackend`` (per-trajectory working dir, per-action cgroup cpuset or CPU affinity)
and ``DockerBackend`` (per-trajectory container, ``docker update`` before every exec).
"""

from workers.agents.cpu.agent import CpuAgent
from workers.agents.cpu.backend import ExecOutcome, ExecutionBackend
from workers.agents.cpu.docker import DockerBackend
from workers.agents.cpu.local import LocalBackend

__all__ = ["CpuAgent", "DockerBackend", "ExecOutcome", "ExecutionBackend", "LocalBackend"]
