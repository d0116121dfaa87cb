"""Kubernetes-like trajectory-level static provisioning (arl-tangram §6.1)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from workers.sim.events import EventHandle, EventLoop
from workers.sim.tangram.baselines.walker import TrajectoryWalker
from workers.sim.tangram.results import ActionRecord, SimResult
from workers.sim.tangram.trace import ActionTemplate, Trace


@dataclass(frozen=True)
class PodParams:
    """Kubernetes-like provisioning; the defaults are the first setting the benchmark used.

    - ``cpu_request`` / ``cpu_limit``: 0.5 CPU per pod, at most 4 (arl-tangram §6.1).
    - ``pods_per_second`` / ``pods_burst``: pod creation passes kube-scheduler's API client,
      whose defaults are 50 QPS and a burst of 100 (kubernetes/kubernetes
      pkg/scheduler/apis/config/v1/defaults.go, ``ClientConnection.QPS``/``Burst``). A burst of
      1 (the default here) is a plain 50/s server, the first setting.
    - ``pod_start_s``: from creation to a running container with the image cached. Kubernetes'
      SLO bounds it at 5 s p99 per cluster-day (kubernetes/community
      sig-scalability/slos/pod_startup_latency.md); about 2 s is reported on an idle cluster
      (github.com/knative/serving/issues/2484).
    - ``exec_overhead_s``: per action. 0.1 s for ``kubectl exec`` through the API server is our
      assumption; the benchmark's fair setting gives pods Loom's own per-exec overhead.

    A pod is ready ``1/pods_per_second + pod_start_s`` after its creation call is admitted."""

    cpu_request: float = 0.5
    cpu_limit: float = 4.0
    pods_per_second: float = 50.0
    pods_burst: int = 1
    pod_start_s: float = 2.0
    exec_overhead_s: float = 0.1

    def __post_init__(self) -> None:
        if self.pods_per_second <= 0 or self.pods_burst < 1:
            raise ValueError("pods_per_second must be > 0 and pods_burst >= 1")
        if self.pod_start_s < 0 or self.exec_overhead_s < 0:
            raise ValueError("pod_start_s and exec_overhead_s must be >= 0")


@dataclass
class _TokenBucket:
    """client-go's token-bucket rate limiter: ``burst`` calls at once, then ``rate`` per second;
    calls are admitted in arrival order."""

    rate: float
    burst: int
    tokens: float = 0.0
    last: float = 0.0

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def admit(self, now: float) -> float:
        """The time the call arriving at ``now`` is admitted (FIFO behind earlier calls)."""
        at = max(now, self.last)
        tokens = min(float(self.burst), self.tokens + (at - self.last) * self.rate)
        if tokens < 1.0:
            at += (1.0 - tokens) / self.rate
            tokens = 1.0
        self.tokens, self.last = tokens - 1.0, at
        return at


def _speedup(template: ActionTemplate, cores: float) -> float:
    """Progress rate at a fractional core share: linear below one core, Eq. 1 above."""
    if cores <= 1.0:
        return cores
    model = template.elasticity_model()
    if model is None:
        return 1.0
    if template.elasticity and "amdahl" in template.elasticity:
        p = float(template.elasticity["amdahl"])
        return 1.0 / ((1.0 - p) + p / cores)
    low = math.floor(cores)
    return model.speedup(low) + (cores - low) * (model.speedup(low + 1) - model.speedup(low))


@dataclass
class _PsJob:
    template: ActionTemplate
    remaining: float  # single-core seconds of work left
    cap: float
    share: float = 0.0
    updated: float = 0.0
    handle: EventHandle | None = None
    done: Callable[[], None] | None = None


class _SharedNode:
    """Max-min fair sharing of a node's cores among running actions (CFS with equal requests)."""

    def __init__(self, loop: EventLoop, cores: int) -> None:
        self.loop = loop
        self.cores = cores
        self.jobs: list[_PsJob] = []

    def add(self, job: _PsJob) -> None:
        self._settle()
        self.jobs.append(job)
        self._reshare()

    def _settle(self) -> None:
        now = self.loop.now
        for job in self.jobs:
            job.remaining -= (now - job.updated) * _speedup(job.template, job.share)
            job.updated = now

    def _reshare(self) -> None:
        left = float(self.cores)
        old = {id(job): job.share for job in self.jobs}
        if sum(job.cap for job in self.jobs) <= left:
            for job in self.jobs:
                job.share = job.cap  # uncongested: everyone gets its cap
        else:
            pending = sorted(self.jobs, key=lambda j: j.cap)
            for i, job in enumerate(pending):
                fair = left / (len(pending) - i)
                job.share = min(job.cap, fair)
                left -= job.share
        now = self.loop.now
        for job in self.jobs:
            if job.handle is not None and old[id(job)] == job.share:
                continue  # unchanged rate: its completion event still stands
            if job.handle is not None:
                job.handle.cancel()
            rate = _speedup(job.template, job.share)
            eta = max(0.0, job.remaining) / rate if rate > 0 else math.inf
            job.handle = self.loop.at(now + eta, partial(self._finish, job))

    def _finish(self, job: _PsJob) -> None:
        self._settle()
        self.jobs.remove(job)
        self._reshare()
        assert job.done is not None
        job.done()


def simulate_static_pods(
    trace: Trace, nodes: int, cores_per_node: int, params: PodParams | None = None
) -> SimResult:
    p = params or PodParams()
    loop = EventLoop()
    walker = TrajectoryWalker(loop, trace)
    machines = [_SharedNode(loop, cores_per_node) for _ in range(nodes)]
    pods_per_node = int(cores_per_node / p.cpu_request)
    pods_on = [0] * nodes
    pod_of: dict[int, int] = {}
    ready_at: dict[int, float] = {}
    waiting_for_pod: dict[int, list[Callable[[], None]]] = {}
    pending_pods: deque[int] = deque()
    creation = _TokenBucket(p.pods_per_second, p.pods_burst)

    def start_waiting(index: int) -> None:
        for execute in waiting_for_pod.pop(index, []):
            execute()

    def place(index: int) -> None:
        candidates = [n for n in range(nodes) if pods_on[n] < pods_per_node]
        if not candidates:
            pending_pods.append(index)
            return
        node = min(candidates, key=lambda n: pods_on[n])
        pods_on[node] += 1
        pod_of[index] = node
        ready = creation.admit(loop.now) + 1.0 / p.pods_per_second + p.pod_start_s
        ready_at[index] = ready
        loop.at(ready, partial(start_waiting, index))

    def run_action(index: int, step: int, template: ActionTemplate, record: ActionRecord) -> None:
        def execute() -> None:
            record.started = loop.now
            parallel = 1.0
            if template.key_resource is not None and template.elasticity is not None:
                parallel = float(template.resources[template.key_resource].maximum)
            job = _PsJob(template, template.t1, cap=min(p.cpu_limit, parallel), updated=loop.now)
            record.dop = max(1, int(job.cap))

            def done() -> None:
                loop.after(p.exec_overhead_s, lambda: walker.finish(index, step, record))

            job.done = done
            machines[pod_of[index]].add(job)

        if index in pod_of and ready_at[index] <= loop.now:
            execute()
        else:
            waiting_for_pod.setdefault(index, []).append(execute)

    def on_end(index: int) -> None:
        node = pod_of.pop(index, None)
        if node is not None:
            pods_on[node] -= 1
            if pending_pods:
                place(pending_pods.popleft())

    walker.run_action = run_action
    walker.on_end = on_end
    for index, trajectory in enumerate(trace.trajectories):
        loop.at(trajectory.start, partial(place, index))
    walker.start()
    loop.run()
    walker.result.name = "static_pods"
    walker.result.makespan = loop.now
    return walker.result
