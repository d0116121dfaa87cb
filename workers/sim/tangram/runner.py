"""Drive the production ``ElasticScheduler`` and topology objects on the virtual clock.

Nothing here re-implements scheduling: trajectories walk their steps on
:class:`workers.sim.events.EventLoop`; each action is submitted to the scheduler of its pool
(``cpu``, ``gpu`` or ``api``), and a pass runs once per virtual instant after any arrival or
completion, plus at the scheduler's ``next_wakeup`` (a quota period rolling over, or at once
after a pass that stopped at its candidate cap) — exactly the calls the scheduler service makes
with wall-clock time. An assigned action runs for its *true* duration at the DoP it got
(``T1/(E(m)·m)``), plus any GPU service restore time, plus the pool's per-action system overhead
(AOE's ``docker update`` + ``exec``; §6.4 Table 1 measures it small).

``compute_slots`` (per pool, none by default) models devices that share the compute they run
on, as the GPU agent's CPU stand-ins share the host's cores: after its restore, an action's
execution waits, in arrival order, for one of the pool's slots, holding its allocation meanwhile
(the agent's ``ServiceCache(compute_slots=...)``). ``admission`` (per pool, none by default)
instead holds an action back before its scheduler sees it, in arrival order, while that many of
the pool's actions are submitted and unfinished: a dispatcher that sends the pool no more work
than it can compute at once, so that each action is placed when it can run (on a warm chunk if
one is free then) rather than on whatever device is idle at its arrival. Its ACT still counts
from its arrival.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial

from workers.algorithms.tangram import ActionSpec, BasicLimit, ElasticScheduler, ResourceDemand
from workers.sim.events import EventLoop
from workers.sim.tangram.results import ActionRecord, SimResult
from workers.sim.tangram.trace import ActionTemplate, Trace


def pool_for(template: ActionTemplate) -> str:
    if "gpu" in template.resources:
        return "gpu"
    if any(name.startswith("api:") for name in template.resources):
        return "api"
    return "cpu"


@dataclass
class RateLimitedApi:
    """The external API itself: it rejects a call over its concurrency or per-period quota
    (HTTP 429). Used to *check* the quota manager (zero rejections) and by the naive baseline."""

    limit: BasicLimit
    in_flight: int = 0
    window: int = -1
    used: int = 0
    rejections: int = 0
    accepted: int = 0

    def admit(self, now: float) -> bool:
        window = math.floor(now / self.limit.period_s)
        if window != self.window:
            self.window, self.used = window, 0
        over_conc = self.limit.concurrency is not None and self.in_flight >= self.limit.concurrency
        over_quota = self.limit.quota is not None and self.used >= self.limit.quota
        if over_conc or over_quota:
            self.rejections += 1
            return False
        self.in_flight += 1
        self.used += 1
        self.accepted += 1
        return True

    def finish(self) -> None:
        self.in_flight -= 1


@dataclass
class _Live:
    template: ActionTemplate
    record: ActionRecord
    trajectory_index: int
    step_index: int
    pool: str
    admitted_by: tuple[str, ...] = ()  # the external APIs that accepted the call


@dataclass
class TangramSimulation:
    """One trace through one scheduler per pool. ``overhead_s``: per-action system overhead."""

    trace: Trace
    schedulers: Mapping[str, ElasticScheduler]
    overhead_s: Mapping[str, float] = field(default_factory=dict)
    apis: Mapping[str, RateLimitedApi] = field(default_factory=dict)
    name: str = "tangram"
    compute_slots: Mapping[str, int] = field(default_factory=dict)
    admission: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if any(limit < 1 for limit in (*self.compute_slots.values(), *self.admission.values())):
            raise ValueError("compute_slots, admission: at least one action per pool")
        self._free_slots = dict(self.compute_slots)
        self._admitted = {pool: 0 for pool in self.admission}
        self._held_back: dict[str, deque[ActionSpec]] = {p: deque() for p in self.admission}
        self._slot_queue: dict[str, deque[tuple[str, float]]] = {
            p: deque() for p in self._free_slots
        }
        self.loop = EventLoop()
        self.result = SimResult(name=self.name)
        self._live: dict[str, _Live] = {}
        self._pass_pending: set[str] = set()
        self._wakeups: set[tuple[str, float]] = set()

    def run(self) -> SimResult:
        for index, trajectory in enumerate(self.trace.trajectories):
            self.loop.at(trajectory.start, partial(self._advance, index, 0))
        self.loop.run()
        stuck = sum(s.waiting_count + s.running_count for s in self.schedulers.values())
        stuck += sum(len(held) for held in self._held_back.values())
        if stuck:
            raise RuntimeError(f"simulation ended with {stuck} actions never finished")
        self.result.makespan = self.loop.now
        self.result.extra["scheduler_passes"] = sum(s.passes for s in self.schedulers.values())
        self.result.extra["api_rejections"] = sum(a.rejections for a in self.apis.values())
        return self.result

    def _advance(self, trajectory_index: int, step_index: int) -> None:
        trajectory = self.trace.trajectories[trajectory_index]
        if step_index >= len(trajectory.steps):
            cpu = self.schedulers.get("cpu")
            if cpu is not None:
                cpu.end_trajectory(trajectory.trajectory_id, self.loop.now)
                self._request_pass("cpu")
            return
        step = trajectory.steps[step_index]
        if step.action is None:
            assert step.llm_seconds is not None
            self.loop.after(
                step.llm_seconds, lambda: self._advance(trajectory_index, step_index + 1)
            )
            return
        template = step.action
        action_id = f"{trajectory.trajectory_id}/{step_index}"
        pool = pool_for(template)
        spec = template.to_spec(action_id, trajectory.trajectory_id)
        if pool == "cpu" and trajectory.memory_mb:
            spec = _with_memory(spec, trajectory.memory_mb)
        record = ActionRecord(action_id, trajectory.trajectory_id, template.kind, self.loop.now)
        self._live[action_id] = _Live(template, record, trajectory_index, step_index, pool)
        if pool in self._admitted and self._admitted[pool] >= self.admission[pool]:
            self._held_back[pool].append(spec)
            return
        self._submit(spec, pool)

    def _submit(self, spec: ActionSpec, pool: str) -> None:
        if pool in self._admitted:
            self._admitted[pool] += 1
        self.schedulers[pool].submit(spec, self.loop.now)
        self._request_pass(pool)

    def _request_pass(self, pool: str) -> None:
        if pool not in self._pass_pending:
            self._pass_pending.add(pool)
            self.loop.at(self.loop.now, lambda: self._pass(pool))

    def _pass(self, pool: str) -> None:
        self._pass_pending.discard(pool)
        scheduler = self.schedulers[pool]
        now = self.loop.now
        for assignment in scheduler.schedule(now):
            live = self._live[assignment.action_id]
            key = live.template.key_resource
            units = assignment.units.get(key, 1) if key else 1
            duration = live.template.true_duration(units)
            prelude = assignment.load_seconds + self.overhead_s.get(pool, 0.0)
            for api_name in assignment.quota_units:
                api = self.apis.get(api_name)
                if api is None:
                    continue
                if api.admit(now):
                    live.admitted_by += (api_name,)
                else:
                    live.record.failed = True  # the API refused it (HTTP 429): the call fails
            live.record.started = now
            live.record.dop = assignment.dop
            live.record.load_s = assignment.load_seconds
            if pool in self._free_slots:
                ready = partial(self._ready, pool, assignment.action_id, duration)
                self.loop.after(prelude, ready)
            else:
                self.loop.after(prelude + duration, partial(self._complete, assignment.action_id))
        wake = scheduler.next_wakeup(now)
        if wake == now:  # a capped pass: the scheduler asks for another at once
            self._request_pass(pool)
        elif wake is not None and wake > now and (pool, wake) not in self._wakeups:
            self._wakeups.add((pool, wake))
            self.loop.at(wake, lambda: self._request_pass(pool))

    def _ready(self, pool: str, action_id: str, duration: float) -> None:
        """Restored: execute once one of the pool's compute slots is free (arrival order)."""
        if self._free_slots[pool] > 0:
            self._free_slots[pool] -= 1
            self.loop.after(duration, partial(self._complete, action_id))
        else:
            self._slot_queue[pool].append((action_id, duration))

    def _release_slot(self, pool: str) -> None:
        if self._slot_queue[pool]:
            action_id, duration = self._slot_queue[pool].popleft()
            self.loop.after(duration, partial(self._complete, action_id))
        else:
            self._free_slots[pool] += 1

    def _complete(self, action_id: str) -> None:
        live = self._live.pop(action_id)
        if live.pool in self._free_slots:
            self._release_slot(live.pool)
        now = self.loop.now
        self.schedulers[live.pool].complete(action_id, now)
        for api_name in live.admitted_by:
            self.apis[api_name].finish()
        live.record.finished = now
        self.result.records.append(live.record)
        if live.pool in self._admitted:
            self._admitted[live.pool] -= 1
            if self._held_back[live.pool]:
                self._submit(self._held_back[live.pool].popleft(), live.pool)
        self._request_pass(live.pool)
        self._advance(live.trajectory_index, live.step_index + 1)


def _with_memory(spec: ActionSpec, memory_mb: int) -> ActionSpec:
    """The trajectory's memory, reserved on its node for its whole life (§5.2)."""
    resources = dict(spec.resources)
    resources["memory_mb"] = ResourceDemand.exactly(memory_mb)
    return replace(spec, resources=resources)
