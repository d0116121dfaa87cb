"""The Ray baseline (artos §6.1), written the way Ray's own examples write distributed RL:
actors are ``@ray.remote`` classes alive for the whole run, the driver is the learner, the
weights go out once per round with ``ray.put`` (one object shared by every actor, no
per-actor copy), and batches come back with ``ray.get`` / ``ray.wait``.

PPO: per iteration, every actor samples ``steps`` steps with the current weights; the driver
``ray.get`` s the list, updates, and repeats (Ray's synchronous parameter-server pattern).

DQN: asynchronous, Ray's best pattern for off-policy collection: every actor always has a
sampling task in flight; the driver ``ray.wait`` s for whichever finishes, adds its batch to the
replay buffer, runs the gradient steps that batch makes due and sends that actor its next task
with the newest weights (Ray's asynchronous parameter-server example).

The actor program, the learner, the replay buffer's sampler and every hyper-parameter are the
ones the Loom run uses. The learner holds its device for the whole job, as a learner actor or
driver holding ``num_gpus`` does. The actors' worker processes run at the raylet's default
``worker_niceness`` (15), below the driver: alternating DQN runs with ``RAY_worker_niceness=0``
held the learner no shorter (the actors then take the learner's cores while it updates).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

from bench._artos_cpu import process_cpu_seconds
from bench._artos_workload import IterationClock, Progress, Workload, actor_names
from workers.actors.program import load_program
from workers.algorithms.artos.dqn import DQNLearner, updates_due
from workers.algorithms.artos.ppo import PPOLearner
from workers.buffers.learner import DeviceLease
from workers.buffers.schema import Schema
from workers.buffers.store import ExperienceBuffer

OBJECT_STORE_BYTES = 256 * 2**20


class SamplingActor:
    """The body of the Ray actor: the same program object a Loom actor runs."""

    def __init__(self, program: str, actor: str, seed: int) -> None:
        self.program: Any = load_program(program)
        self.program.prepare()
        self.state = self.program.start(actor, seed)

    def sample(self, params: Any, steps: int) -> dict[str, np.ndarray]:
        self.state, batch = self.program.sample(self.state, params, steps)
        return batch

    def pid(self) -> int:
        return os.getpid()

    def niceness(self) -> int:
        """The niceness the raylet started this worker at (its ``worker_niceness``)."""
        return os.getpriority(os.PRIO_PROCESS, 0)


def start_ray() -> Any:
    """The platform: GCS and raylet sized to this machine, no dashboard."""
    import ray

    ray.init(
        num_cpus=len(os.sched_getaffinity(0)),
        include_dashboard=False,
        object_store_memory=OBJECT_STORE_BYTES,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    return ray


def _actor_class(ray: Any, workload: Workload) -> Any:
    names = actor_names(workload)
    cpus = len(os.sched_getaffinity(0)) / len(names)  # the most actors, scheduled at once
    return ray.remote(num_cpus=cpus)(SamplingActor)


def _actors(ray: Any, workload: Workload) -> list[Any]:
    remote = _actor_class(ray, workload)
    return [
        remote.remote(workload.program, name, workload.seed + index)
        for index, name in enumerate(actor_names(workload))
    ]


def run_ppo(ray: Any, workload: Workload, device: str, lock_dir: str) -> dict[str, Any]:
    program: Any = load_program(workload.program)
    learner = PPOLearner(program.config)
    lease = DeviceLease(device, movable=learner, lock_dir=lock_dir)
    progress = Progress(workload)
    lease.acquire()
    busy_s = 0.0
    try:
        actors = _actors(ray, workload)
        while not progress.done:
            params = ray.put(learner.params())
            batches = ray.get([actor.sample.remote(params, workload.steps) for actor in actors])
            batch = {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}
            started = time.perf_counter()
            learner.update(batch, len(batches))
            busy_s += time.perf_counter() - started
            progress.add_episodes(batch["episode_return"])
            progress.point(progress.env_steps + len(batch["reward"]))
    finally:
        lease.release()
    return progress.summary(
        learner_held_s=lease.held_s(),
        learner_busy_s=busy_s,
        learner_leases=1,
        actor_held_core_s=_actor_held_core_s(progress),
        actor_niceness=_niceness(ray, actors),
    )


def run_dqn(ray: Any, workload: Workload, device: str, lock_dir: str) -> dict[str, Any]:
    program: Any = load_program(workload.program)
    config = program.config
    learner = DQNLearner(config)
    replay = ExperienceBuffer(
        "replay", Schema(program.schema_fields()), workload.replay_capacity, seed=workload.seed
    )
    lease = DeviceLease(device, movable=learner, lock_dir=lock_dir)
    progress = Progress(workload)
    lease.acquire()
    busy_s = 0.0
    try:
        actors = _actors(ray, workload)
        params = ray.put(learner.params(0))
        pending = {
            actor.sample.remote(params, workload.steps): (name, actor)
            for name, actor in zip(actor_names(workload), actors, strict=True)
        }
        while not progress.done:
            (ready,), _ = ray.wait(list(pending), num_returns=1)
            name, actor = pending.pop(ready)
            batch = ray.get(ready)
            started = time.perf_counter()
            replay.put(name, batch)
            progress.add_episodes(batch["episode_return"])
            env_steps = progress.env_steps + workload.steps
            for _ in range(updates_due(config, env_steps, learner.updates)):
                _, sample = replay.sample_uniform(config.batch_size)
                learner.update(sample)
            params = ray.put(learner.params(env_steps))
            busy_s += time.perf_counter() - started
            pending[actor.sample.remote(params, workload.steps)] = (name, actor)
            progress.point(env_steps, min_interval_s=0.25)
        progress.point(progress.env_steps)
        ray.wait(list(pending), num_returns=len(pending))
    finally:
        lease.release()
    return progress.summary(
        learner_held_s=lease.held_s(),
        learner_busy_s=busy_s,
        learner_leases=1,
        updates=learner.updates,
        actor_held_core_s=_actor_held_core_s(progress),
        actor_niceness=_niceness(ray, actors),
    )


def run_ppo_scaling(ray: Any, workload: Workload, device: str, lock_dir: str) -> dict[str, Any]:
    """PPO whose actor count follows ``workload.actor_schedule``, the way Ray changes it: more
    actors are created (a worker process each, importing and preparing the program), fewer
    are killed (``ray.kill``: their cores go back, their state with them)."""
    program: Any = load_program(workload.program)
    learner = PPOLearner(program.config)
    remote = _actor_class(ray, workload)
    names = actor_names(workload)
    progress = Progress(workload)
    clock = IterationClock()
    actors: list[Any] = []
    created = killed = 0
    for count in workload.actor_schedule:
        clock.begin()
        while len(actors) < count:
            index = len(actors)
            actors.append(remote.remote(workload.program, names[index], workload.seed + index))
            created += 1
        while len(actors) > count:
            _kill(ray, actors.pop(), clock)
            killed += 1
        params = ray.put(learner.params())
        batches = ray.get([actor.sample.remote(params, workload.steps) for actor in actors])
        clock.collected()
        batch = {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}
        learner.update(batch, count)
        progress.add_episodes(batch["episode_return"])
        progress.point(progress.env_steps + len(batch["reward"]))
        clock.end(count)
    return progress.summary(
        iterations=clock.rows,
        actors_created=created,
        actors_killed=killed,
        learner_held_s=0.0,
    )


def _kill(ray: Any, actor: Any, clock: IterationClock, timeout_s: float = 10.0) -> None:
    """``ray.kill`` the actor and wait for its process to end; its CPU, read just before,
    stays in the iteration's count (the raylet reaps it without accounting)."""
    pid = ray.get(actor.pid.remote())
    clock.gone(process_cpu_seconds(pid) or 0.0)
    ray.kill(actor)
    deadline = time.monotonic() + timeout_s
    while process_cpu_seconds(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.005)


def _niceness(ray: Any, actors: list[Any]) -> list[int]:
    """The distinct nicenesses of the actors' processes (read after the learner's lease)."""
    return sorted(set(ray.get([actor.niceness.remote() for actor in actors])))


def _actor_held_core_s(progress: Progress) -> float:
    """The actors reserve every core (``num_cpus``) from their creation to the job's end."""
    return len(os.sched_getaffinity(0)) * (time.monotonic() - progress.started)


RUNNERS = {"ppo": run_ppo, "dqn": run_dqn, "ppo_scaling": run_ppo_scaling}
