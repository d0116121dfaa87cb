"""What the ARTOS-vs-Ray benches run in both systems (artos §6.1), and how a run's progress is
recorded: the learning curve, the CPU-seconds of the run's process tree, and the moment the
return target is reached.

A run's clock starts at the *job*: after the platform is up (Ray's GCS and raylet from
``ray.init``; Loom's buffer service), before either system starts its actors (Ray actor
processes; Loom's zygote). The platform's own start-up is reported apart.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from bench._artos_cpu import tree_breakdown, tree_cpu_seconds


@dataclass(frozen=True)
class Workload:
    """Identical in both systems: algorithm, actor program, actors, steps, seed, stop rule."""

    algorithm: str  # "ppo" or "dqn"
    program: str  # module:attribute of the actor program (workers.actors.gym_programs)
    actors: int
    steps: int  # steps per actor per sampling call (one invocation, one Ray task)
    target_return: float  # mean return of the last ``window`` episodes to reach
    window: int
    max_env_steps: int
    replay_capacity: int = 0  # off-policy only
    seed: int = 0
    actor_schedule: tuple[int, ...] = ()  # the actor-scaling bench: actors per iteration

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workload:
        return cls(**{**data, "actor_schedule": tuple(data.get("actor_schedule", ()))})


def actor_names(workload: Workload) -> list[str]:
    """Every actor the run may use (the most the schedule asks for, when it has one)."""
    return [f"actor{i}" for i in range(max(workload.actors, *workload.actor_schedule, 0))]


@dataclass
class IterationClock:
    """Wall and CPU time of each iteration of a run (the actor-scaling bench): from the
    learner publishing the parameters, through collection, to the end of its update."""

    rows: list[dict[str, float]] = field(default_factory=list)
    _began: tuple[float, float] = (0.0, 0.0)
    _collected: float = 0.0
    _gone_cpu_s: float = 0.0

    def begin(self) -> None:
        self._began = (time.monotonic(), tree_cpu_seconds()[0])
        self._gone_cpu_s = 0.0

    def gone(self, cpu_s: float) -> None:
        """A process of the tree is ending that no process of the tree reaps with accounting
        (Ray's raylet reaps a killed actor's worker): its CPU, read just before, stays counted
        instead of leaving the tree's total."""
        self._gone_cpu_s += cpu_s

    def collected(self) -> None:
        self._collected = time.monotonic()

    def end(self, actors: int) -> None:
        began, cpu = self._began
        self.rows.append(
            {
                "iteration": float(len(self.rows)),
                "actors": float(actors),
                "collect_s": self._collected - began,
                "iteration_s": time.monotonic() - began,
                "cpu_s": tree_cpu_seconds()[0] + self._gone_cpu_s - cpu,
            }
        )


def thread_times() -> tuple[float, float]:
    """This thread's ``(CPU-seconds, seconds runnable but waiting for a core)`` so far, from
    the kernel's ``schedstat`` (zeros where it has none)."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            on_cpu, waiting, _ = stat.read().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(on_cpu) / 1e9, int(waiting) / 1e9


@dataclass
class Progress:
    """The learning curve and resource use of one run, recorded by its learner."""

    workload: Workload
    started: float = field(default_factory=time.monotonic)
    cpu_at_start: float = field(default_factory=lambda: tree_cpu_seconds()[0])
    returns: list[float] = field(default_factory=list)
    curve: list[dict[str, float]] = field(default_factory=list)
    env_steps: int = 0
    reached: dict[str, float] | None = None
    # the learner's thread (the one recording progress), from the start to the target: on a
    # core, runnable but waiting for one, and neither (waiting for data, a lock, the GIL)
    learner_thread: dict[str, float] | None = None
    _thread_at_start: tuple[float, float] = field(default_factory=thread_times)
    _last_point: float = 0.0

    def add_episodes(self, episode_return: npt.NDArray[Any]) -> None:
        """Episode returns ended in a batch (NaN marks steps where none ended)."""
        values = np.asarray(episode_return, np.float64)
        self.returns += [float(v) for v in values[~np.isnan(values)]]

    def mean_return(self) -> float | None:
        if len(self.returns) < self.workload.window:
            return None
        return float(np.mean(self.returns[-self.workload.window :]))

    def cpu_s(self) -> float:
        return tree_cpu_seconds()[0] - self.cpu_at_start

    def point(self, env_steps: int, min_interval_s: float = 0.0) -> None:
        """Record progress after a learner step; the first crossing of the target is kept."""
        self.env_steps = env_steps
        now = time.monotonic()
        mean = self.mean_return()
        crossed = self.reached is None and mean is not None and mean >= self.workload.target_return
        if not crossed and now - self._last_point < min_interval_s:
            return
        self._last_point = now
        row = {
            "t_s": now - self.started,
            "cpu_s": self.cpu_s(),
            "env_steps": float(env_steps),
            "episodes": float(len(self.returns)),
            "mean_return": math.nan if mean is None else mean,
        }
        self.curve.append(row)
        if crossed:
            self.reached = dict(row)
            (cpu, waiting), (cpu_0, waiting_0) = thread_times(), self._thread_at_start
            on_cpu, runnable = cpu - cpu_0, waiting - waiting_0
            self.learner_thread = {
                "on_cpu_s": on_cpu,
                "runnable_waiting_s": runnable,
                "blocked_s": row["t_s"] - on_cpu - runnable,
            }

    @property
    def done(self) -> bool:
        return self.reached is not None or self.env_steps >= self.workload.max_env_steps

    def summary(self, **extra: Any) -> dict[str, Any]:
        last = self.curve[-1] if self.curve else {}
        return {
            "reached": self.reached is not None,
            "time_to_target_s": None if self.reached is None else self.reached["t_s"],
            "cpu_to_target_s": None if self.reached is None else self.reached["cpu_s"],
            "env_steps_to_target": None if self.reached is None else self.reached["env_steps"],
            "end_t_s": last.get("t_s"),
            "end_cpu_s": last.get("cpu_s"),
            "env_steps": self.env_steps,
            "episodes": len(self.returns),
            "learner_thread_to_target": self.learner_thread,
            "cpu_by_process_at_end": tree_breakdown(),
            "curve": [
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in self.curve
            ],
            **extra,
        }
