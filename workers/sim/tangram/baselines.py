"""Baselines the paper compares ARL-Tangram with (arl-tangram §6.1, §6.3, §6.4), each a model.

Baselines that are only a different *policy* run through the same scheduler and topology code:

- fixed DoP 4 / 16 (§6.4, Fig. 9): ``ElasticScheduler(algorithm="fixed-dop", fixed_dop=4|16)``;
- ServerlessLLM-like load-on-demand (§6.3): the GPU topology with ``fixed-dop`` (no elastic
  reallocation) and a slower restore (``SERVERLESS_LOAD_MULTIPLIER``: it loads checkpoints from
  its own storage tier instead of restoring pinned CPU-memory copies, and §6.3 reports "higher
  system overhead").

Baselines that are a different *system* are simulated here on the same event loop:

- :func:`simulate_static_pods` — Kubernetes-like trajectory-level static provisioning (§6.1):
  one pod per trajectory, CPU request 0.5 / limit 4, held for the trajectory's whole life. Pods
  are created through a control plane of limited throughput and start after a fixed delay; an
  action runs inside its pod, and the node's cores are shared among running actions by CFS-like
  max-min fair sharing, each capped by the pod limit and the action's parallelism.
- :func:`simulate_isolated_services` — task-level isolated GPU services (SGLang-like, §6.1):
  each model on its own 4-GPU group with TP=4, always resident, FCFS, one request at a time.
- :func:`simulate_naive_api` — every trajectory calls the APIs directly and retries on a
  rate-limit error, at most three times, with exponential backoff (§6.1 DeepSearch baseline).
- :func:`lower_bound` — no queueing, best allocation: each action alone at its best DoP.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from workers.algorithms.tangram import BasicLimit
from workers.sim.events import EventHandle, EventLoop
from workers.sim.tangram.results import ActionRecord, SimResult
from workers.sim.tangram.runner import RateLimitedApi, pool_for
from workers.sim.tangram.trace import ActionTemplate, Trace

SERVERLESS_LOAD_MULTIPLIER = 3.0


@dataclass(frozen=True)
class PodParams:
    """Kubernetes-like provisioning. Request/limit from §6.1; the rest is our assumption:
    kube-scheduler's default API QPS (50) bounds pod creation, ~2 s container start with a
    cached image, ~0.1 s per ``kubectl exec`` through the API server."""

    cpu_request: float = 0.5
    cpu_limit: float = 4.0
    pods_per_second: float = 50.0
    pod_start_s: float = 2.0
    exec_overhead_s: float = 0.1


class _TrajectoryWalker:
    """Walks a trajectory's steps; ``run_action(template, done)`` executes one action."""

    def __init__(self, loop: EventLoop, trace: Trace) -> None:
        self.loop = loop
        self.trace = trace
        self.result = SimResult(name="baseline")
        self.run_action: Callable[[int, int, ActionTemplate, ActionRecord], None] | None = None
        self.on_end: Callable[[int], None] | None = None

    def start(self) -> None:
        for index, trajectory in enumerate(self.trace.trajectories):
            self.loop.at(trajectory.start, partial(self.advance, index, 0))

    def advance(self, index: int, step_index: int) -> None:
        trajectory = self.trace.trajectories[index]
        if step_index >= len(trajectory.steps):
            if self.on_end is not None:
                self.on_end(index)
            return
        step = trajectory.steps[step_index]
        if step.action is None:
            assert step.llm_seconds is not None
            self.loop.after(step.llm_seconds, lambda: self.advance(index, step_index + 1))
            return
        record = ActionRecord(
            f"{trajectory.trajectory_id}/{step_index}",
            trajectory.trajectory_id,
            step.action.kind,
            self.loop.now,
        )
        assert self.run_action is not None
        self.run_action(index, step_index, step.action, record)

    def finish(self, index: int, step_index: int, record: ActionRecord) -> None:
        record.finished = self.loop.now
        self.result.records.append(record)
        self.advance(index, step_index + 1)


# --- static provisioning (Kubernetes-like) --------------------------------------------------


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
    walker = _TrajectoryWalker(loop, trace)
    machines = [_SharedNode(loop, cores_per_node) for _ in range(nodes)]
    pods_per_node = int(cores_per_node / p.cpu_request)
    pods_on = [0] * nodes
    pod_of: dict[int, int] = {}
    ready_at: dict[int, float] = {}
    waiting_for_pod: dict[int, list[Callable[[], None]]] = {}
    pending_pods: deque[int] = deque()
    creation = {"next_free": 0.0}

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
        start = max(loop.now, creation["next_free"])
        creation["next_free"] = start + 1.0 / p.pods_per_second
        ready = start + 1.0 / p.pods_per_second + p.pod_start_s
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


# --- isolated GPU services (SGLang-like) ----------------------------------------------------


def simulate_isolated_services(trace: Trace, gpus_per_service: int = 4) -> SimResult:
    """Each service on its own ``gpus_per_service`` GPUs, FCFS, one request at a time."""
    loop = EventLoop()
    walker = _TrajectoryWalker(loop, trace)
    queues: dict[str, deque[Callable[[], None]]] = {}
    busy: set[str] = set()

    def next_request(service: str) -> None:
        queue = queues.get(service)
        if queue:
            queue.popleft()()
        else:
            busy.discard(service)

    def run_action(index: int, step: int, template: ActionTemplate, record: ActionRecord) -> None:
        service = template.service or template.tool
        options = template.resources["gpu"].options() if "gpu" in template.resources else (1,)
        dop = max([u for u in options if u <= gpus_per_service] or [options[0]])

        def execute() -> None:
            busy.add(service)
            record.started = loop.now
            record.dop = dop

            def done() -> None:
                walker.finish(index, step, record)
                next_request(service)

            loop.after(template.true_duration(dop), done)

        if service in busy:
            queues.setdefault(service, deque()).append(execute)
        else:
            execute()

    walker.run_action = run_action
    walker.start()
    loop.run()
    walker.result.name = f"isolated_{gpus_per_service}gpu"
    walker.result.makespan = loop.now
    return walker.result


# --- naive API calls with retries -----------------------------------------------------------


@dataclass(frozen=True)
class RetryParams:
    """§6.1: "retry at most three times when encountering errors"; backoff and the 429 latency
    are our assumption."""

    max_retries: int = 3
    backoff_s: float = 1.0
    error_latency_s: float = 0.1


def simulate_naive_api(
    trace: Trace,
    limits: Mapping[str, BasicLimit],
    params: RetryParams | None = None,
    judge_replicas: int = 5,
    judge_gpus_per_replica: int = 8,
) -> SimResult:
    """API calls go straight to the rate-limited API. GPU (judge) calls go to
    ``judge_replicas`` isolated replicas of ``judge_gpus_per_replica`` GPUs each, FCFS (§6.1:
    "five replicas and degree of TP as 8")."""
    p = params or RetryParams()
    loop = EventLoop()
    walker = _TrajectoryWalker(loop, trace)
    apis = {name: RateLimitedApi(limit) for name, limit in limits.items()}
    judge_queue: deque[Callable[[], None]] = deque()
    idle_replicas = [judge_replicas]

    def release_replica() -> None:
        if judge_queue:
            judge_queue.popleft()()
        else:
            idle_replicas[0] += 1

    def run_judge(index: int, step: int, template: ActionTemplate, record: ActionRecord) -> None:
        def execute() -> None:
            record.started = loop.now
            record.dop = judge_gpus_per_replica

            def done() -> None:
                walker.finish(index, step, record)
                release_replica()

            loop.after(template.true_duration(judge_gpus_per_replica), done)

        if idle_replicas[0] > 0:
            idle_replicas[0] -= 1
            execute()
        else:
            judge_queue.append(execute)

    def run_action(index: int, step: int, template: ActionTemplate, record: ActionRecord) -> None:
        if pool_for(template) != "api":
            run_judge(index, step, template, record)
            return
        name = next(r for r in template.resources if r.startswith("api:"))
        api = apis[name]

        def attempt(tries: int) -> None:
            if api.admit(loop.now):
                if math.isnan(record.started):
                    record.started = loop.now

                def done() -> None:
                    api.finish()
                    walker.finish(index, step, record)

                loop.after(template.t1, done)
                return
            record.attempts = tries + 1
            if tries >= p.max_retries:
                record.failed = True
                record.started = loop.now
                loop.after(p.error_latency_s, lambda: walker.finish(index, step, record))
                return
            wait = p.error_latency_s + p.backoff_s * (2**tries)
            loop.after(wait, lambda: attempt(tries + 1))

        attempt(0)

    walker.run_action = run_action
    walker.start()
    loop.run()
    walker.result.name = "naive_api"
    walker.result.makespan = loop.now
    walker.result.extra["api_rejections"] = sum(a.rejections for a in apis.values())
    return walker.result


# --- lower bound ----------------------------------------------------------------------------


def lower_bound(trace: Trace, max_units: Mapping[str, int]) -> SimResult:
    """Every action alone on an idle pool at its best feasible DoP, no queueing, no restore.

    ``max_units`` caps the key resource per pool (cores per node, GPUs per node)."""
    result = SimResult(name="lower_bound")
    for trajectory in trace.trajectories:
        for index, step in enumerate(trajectory.steps):
            template = step.action
            if template is None:
                continue
            best = template.t1
            key = template.key_resource
            if key is not None and template.elasticity is not None:
                cap = max_units.get(pool_for(template), 1 << 30)
                options = [u for u in template.resources[key].options() if u <= cap] or [1]
                best = min(template.true_duration(u) for u in options)
            record = ActionRecord(
                f"{trajectory.trajectory_id}/{index}", trajectory.trajectory_id, template.kind, 0.0
            )
            record.started, record.finished = 0.0, best
            result.records.append(record)
    return result
