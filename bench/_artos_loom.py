"""ARTOS on Loom (artos §3–§4): the reference workloads as a declared ``Workflow``.

The actors' zygote is forked from the run's process (``ZYGOTE_START``), which imported the
program's libraries before the clock started, as a trainer's process has.

PPO (on-policy, Table 3): publishing ``model_param`` invokes the elastic actors
(ObjectKeyTrigger -> ``ACTORS``); each samples ``steps`` steps into the rollout buffer and
checkpoints, then stays parked for ``KEEP_WARM_S`` (forked from the zygote and restored from its
checkpoint when it is not parked: the first invocation, or after a longer pause); the full batch
(DataKeyTrigger with ``n = actors``) fires the on-demand learner, which takes its device,
updates, gives the device back and publishes the next parameters.

DQN (off-policy): every actor is re-invoked as soon as its previous invocation ended unless it
is already a batch ahead of the learner, so collection overlaps learning without outrunning
the algorithm's replay ratio; each delivered batch (DataKeyTrigger ``n = 1``) fires
the learner, which samples the replay buffer uniformly for the gradient steps that batch makes
due and publishes the weights; actors read the newest weights at their next invocation.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from bench._artos_workload import IterationClock, Progress, Workload, actor_names
from workers.actors.program import load_program
from workers.algorithms.artos import DataKeyTrigger, Firing, ObjectKeyTrigger
from workers.algorithms.artos.dqn import DQNLearner, updates_due
from workers.algorithms.artos.ppo import PPOLearner
from workers.buffers.learner import DeviceLease, OnDemandLearner
from workers.buffers.schema import Schema
from workers.buffers.workflow import ACTORS, RunningWorkflow, Workflow

PARAMS_KEY = "model_param"
# an actor's process stays parked this long after its checkpoint and serves the next
# invocation without a fork (workers.actors.zygote); both workloads re-invoke well within it.
# The runs with a fork per invocation (0) are kept as results/*_fork_per_invocation.json
KEEP_WARM_S = 1.0
# the zygote is forked from the run's own process, which imported torch before the clock (as a
# trainer's process has); the runs with a fresh-interpreter zygote ("spawn") are kept as
# results/*_zygote_spawn.json
ZYGOTE_START = "fork"
AHEAD_BATCHES = 1  # off-policy: batches an actor may deliver ahead of the learner
# the learner first: the actors run at the niceness Ray's raylet gives every worker process by
# default (``worker_niceness``), so in both systems the learner's process outranks its own
# actors on the cores they share (artos §4.1 runs them on different nodes). The runs with the
# actors at the learner's priority (0) are kept as results/*_actors_nice0*.json
ACTOR_NICENESS = 15


def checkpoint_root() -> str | None:
    """Where the actors' checkpoints go: shared memory (``/dev/shm``) where the node has it, so
    a checkpoint is a page-cache copy and never a disk write; the temporary directory else."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _schema(workload: Workload) -> Schema:
    program: Any = load_program(workload.program)
    return Schema(program.schema_fields())


def _config(workload: Workload) -> Any:
    program: Any = load_program(workload.program)
    return program.config


def _declare(
    flow: Workflow, buffer: str, workload: Workload, learn: DataKeyTrigger, target: Any
) -> Workflow:
    """The learner trigger on ``buffer``, the elastic actors sampling into it, the learner."""
    return (
        flow.trigger(buffer, "learn", learn, target)
        .actors(
            "actor",
            count=workload.actors,
            program=workload.program,
            buffer=buffer,
            steps=workload.steps,
            params_key=PARAMS_KEY,
            keep_warm_s=KEEP_WARM_S,
            start_method=ZYGOTE_START,
            niceness=ACTOR_NICENESS,
        )
        .learner("learner", trigger="learn")
    )


def run_ppo(workload: Workload, device: str, lock_dir: str) -> dict[str, Any]:
    schema = _schema(workload)
    learner = PPOLearner(_config(workload))
    firings: queue.Queue[Firing] = queue.Queue()
    names = actor_names(workload)
    flow = _declare(
        Workflow("ppo").buffer(
            "rollout", schema, workload.actors * workload.steps, eviction="keep_unsampled"
        ),
        "rollout",
        workload,
        DataKeyTrigger(workload.actors, workload.steps, schema.keys),
        firings,
    )
    flow.trigger("rollout", "invoke", ObjectKeyTrigger(PARAMS_KEY), ACTORS)
    lease = DeviceLease(device, movable=learner, lock_dir=lock_dir)
    with tempfile.TemporaryDirectory(prefix="artos-ppo-", dir=checkpoint_root()) as checkpoints:
        progress = Progress(workload)
        running = flow.start(checkpoint_dir=checkpoints)
        try:
            buffer = running.buffers["rollout"]

            def learn(firing: Firing) -> None:
                slices = dict(sorted(firing["actors"].items()))  # actor order, as Ray's list
                batch = buffer.gather(slices, consume=True)
                learner.update(batch, len(slices))
                progress.add_episodes(batch["episode_return"])
                progress.point(progress.env_steps + len(batch["reward"]))
                if not progress.done:
                    running.pool.wait(names)  # checkpointed: ready for the next invocation
                    buffer.put_object(PARAMS_KEY, learner.params())

            on_demand = OnDemandLearner(lease, learn, firings)
            failures = _stop_on_failure(running, on_demand)
            buffer.put_object(PARAMS_KEY, learner.params())
            on_demand.run(until=lambda: progress.done)
            if failures:
                raise RuntimeError(f"actor failed: {failures[0].get('error')}")
            running.pool.wait(names)
            return progress.summary(
                learner_held_s=lease.held_s(),
                learner_busy_s=on_demand.busy_s,
                learner_leases=len(lease.intervals),
                actor_startup_waits_s=_startup_waits(running),
                actor_held_core_s=_actor_held_core_s(running),
                actor_niceness=_niceness(running),
                zygote_started_by=running.pool.started_by,
            )
        finally:
            running.stop()


class AheadLimit:
    """Off-policy rate limit: an actor may run ``ahead`` delivered-but-unlearned batches ahead
    of the learner (collection overlaps learning by that much, and no more, so the learner's
    gradient steps per collected step stay what the algorithm says)."""

    def __init__(self, ahead: int) -> None:
        self.ahead = ahead
        self.invoke: Callable[[str], Any] = lambda actor: None  # the pool's, once started
        self.pending: dict[str, int] = {}
        self.parked: set[str] = set()
        self.collecting = True
        self.lock = threading.Lock()

    def delivered(self, firings: queue.Queue[Firing]) -> Callable[[Firing], None]:
        def target(firing: Firing) -> None:  # the learner trigger's target (direct passer)
            with self.lock:
                for actor in firing["actors"]:
                    self.pending[actor] = self.pending.get(actor, 0) + 1
            firings.put(firing)

        return target

    def exited(self, actor: str) -> None:
        with self.lock:
            if not self.collecting:
                return
            if self.pending.get(actor, 0) > self.ahead:
                self.parked.add(actor)
                return
        self.invoke(actor)

    def learned(self, actor: str) -> None:
        with self.lock:
            self.pending[actor] -= 1
            resume = self.collecting and actor in self.parked and self.pending[actor] <= self.ahead
            if resume:
                self.parked.discard(actor)
        if resume:
            self.invoke(actor)

    def stop(self) -> None:
        with self.lock:
            self.collecting = False


def run_dqn(workload: Workload, device: str, lock_dir: str) -> dict[str, Any]:
    schema = _schema(workload)
    config = _config(workload)
    learner = DQNLearner(config)
    firings: queue.Queue[Firing] = queue.Queue()
    names = actor_names(workload)
    limit = AheadLimit(AHEAD_BATCHES)
    flow = _declare(
        Workflow("dqn").buffer(
            "replay", schema, workload.replay_capacity, eviction="fifo", seed=workload.seed
        ),
        "replay",
        workload,
        DataKeyTrigger(1, workload.steps, schema.keys),
        limit.delivered(firings),
    )
    lease = DeviceLease(device, movable=learner, lock_dir=lock_dir)
    with tempfile.TemporaryDirectory(prefix="artos-dqn-", dir=checkpoint_root()) as checkpoints:
        progress = Progress(workload)
        running = flow.start(checkpoint_dir=checkpoints)
        try:
            buffer = running.buffers["replay"]
            pool = running.pool
            limit.invoke = pool.invoke

            def learn(firing: Firing) -> None:
                ((actor, span),) = firing["actors"].items()
                returns = buffer.gather({actor: span}, keys=["episode_return"])
                progress.add_episodes(returns["episode_return"])
                env_steps = progress.env_steps + workload.steps
                for _ in range(updates_due(config, env_steps, learner.updates)):
                    _, batch = buffer.sample_uniform(config.batch_size)
                    learner.update(batch)
                buffer.put_object(PARAMS_KEY, learner.params(env_steps))
                progress.point(env_steps, min_interval_s=0.25)
                limit.learned(actor)

            on_demand = OnDemandLearner(lease, learn, firings)
            failures = _stop_on_failure(running, on_demand)

            def on_exit(event: dict[str, Any]) -> None:  # collection runs ahead of learning
                if event.get("event") == "exited" and event.get("code") == 0:
                    limit.exited(event["actor"])

            buffer.put_object(PARAMS_KEY, learner.params(0))
            pool.listeners.append(on_exit)
            for actor in names:
                pool.invoke(actor)
            on_demand.run(until=lambda: progress.done)
            limit.stop()
            if failures:
                raise RuntimeError(f"actor failed: {failures[0].get('error')}")
            progress.point(progress.env_steps)
            summary = progress.summary(
                learner_held_s=lease.held_s(),
                learner_busy_s=on_demand.busy_s,
                learner_leases=len(lease.intervals),
                updates=learner.updates,
                ahead_batches=AHEAD_BATCHES,
                actor_startup_waits_s=_startup_waits(running),
                actor_held_core_s=_actor_held_core_s(running),
                actor_niceness=_niceness(running),
                zygote_started_by=pool.started_by,
            )
            pool.wait(names)
            return summary
        finally:
            running.stop()


def _stop_on_failure(running: RunningWorkflow, on_demand: OnDemandLearner) -> list[dict[str, Any]]:
    """An actor that fails ends the run (the bench reports it) instead of a learner waiting."""
    failures: list[dict[str, Any]] = []

    def watch(event: dict[str, Any]) -> None:
        if event.get("event") == "failed":
            failures.append(event)
            on_demand.stop()

    running.pool.listeners.append(watch)
    return failures


def _actor_held_core_s(running: RunningWorkflow) -> float:
    """Core-seconds the elastic actors held (fork request to exit, times their cores): the
    paper's resource time (artos Fig. 14), which a long-running actor holds for the whole job."""
    return sum(
        (i.finished_at - i.requested_at) * max(1, len(i.cores))
        for record in running.pool.records.values()
        for i in record.history
        if i.finished_at is not None and i.requested_at
    )


def _niceness(running: RunningWorkflow) -> list[int]:
    """The distinct nicenesses the actors' processes reported when ready."""
    return sorted(
        {
            i.niceness
            for record in running.pool.records.values()
            for i in record.history
            if i.niceness is not None
        }
    )


def _startup_waits(running: RunningWorkflow) -> dict[str, float]:
    waits = [
        i.startup_wait_s
        for record in running.pool.records.values()
        for i in record.history
        if i.startup_wait_s is not None
    ]
    if not waits:
        return {}
    waits.sort()
    return {"count": len(waits), "median": waits[len(waits) // 2], "max": waits[-1]}


def run_ppo_scaling(workload: Workload, device: str, lock_dir: str) -> dict[str, Any]:
    """PPO whose actor count follows ``workload.actor_schedule`` from one iteration to the next
    (adaptive batch size, artos §4.3): the one zygote forks however many actors the iteration
    asks for; an actor left out is only a checkpoint until it is asked for again. Each
    iteration invokes its actors, gathers their segments in actor order and updates."""
    schedule = workload.actor_schedule
    schema = _schema(workload)
    learner = PPOLearner(_config(workload))
    names = actor_names(workload)
    flow = Workflow("ppo-scaling").buffer(
        "rollout", schema, len(names) * workload.steps, eviction="keep_unsampled"
    )
    flow.actors(
        "actor",
        count=len(names),
        program=workload.program,
        buffer="rollout",
        steps=workload.steps,
        params_key=PARAMS_KEY,
    )
    clock = IterationClock()
    with tempfile.TemporaryDirectory(prefix="artos-scale-", dir=checkpoint_root()) as checkpoints:
        progress = Progress(workload)
        running = flow.start(checkpoint_dir=checkpoints)
        try:
            buffer, pool = running.buffers["rollout"], running.pool
            zygote_pids = {pool._process.pid}
            for count in schedule:
                chosen = names[:count]
                clock.begin()
                since = {a: pool.records[a].steps_done for a in chosen}
                buffer.put_object(PARAMS_KEY, learner.params())
                results = pool.run_iteration(chosen)
                failed = [a for a, i in results.items() if not i.sampled]
                if failed:
                    raise RuntimeError(f"actors {failed} failed: {results[failed[0]].error}")
                clock.collected()
                slices = {a: (since[a], pool.records[a].steps_done) for a in chosen}
                batch = buffer.gather(slices, consume=True)
                learner.update(batch, count)
                progress.add_episodes(batch["episode_return"])
                progress.point(progress.env_steps + len(batch["reward"]))
                clock.end(count)
                zygote_pids.add(pool._process.pid)
            return progress.summary(
                iterations=clock.rows,
                zygote_starts=len(zygote_pids),
                actor_startup_waits_s=_startup_waits(running),
                learner_held_s=0.0,
            )
        finally:
            running.stop()


RUNNERS = {"ppo": run_ppo, "dqn": run_dqn, "ppo_scaling": run_ppo_scaling}
