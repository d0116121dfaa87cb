"""ARTOS vs Ray on off-policy training (artos §6.2, Fig. 12 c-d, Fig. 13 b): DQN on CartPole-v1
(uniform replay, artos Table 1), the same actor program, learner, replay sampler and
hyper-parameters in both systems, until the mean return of the last ``window`` episodes reaches
the target.

Loom: elastic actors (forked from a zygote that is itself forked from the run's process, kept
warm between invocations, as ``artos_ppo``) re-invoked as soon as they delivered, a
DataKeyTrigger(n=1) per delivered batch firing the on-demand learner, weights published as
buffer model data. Ray: actors alive for the whole run, each always with a sampling task in
flight, the driver ``ray.wait`` ing for the next batch (Ray's asynchronous pattern, its best for
off-policy collection). Targets as ``artos_ppo``.
"""

from __future__ import annotations

from bench._artos_compare import compare
from bench._artos_workload import Workload
from bench.report import BenchReport

NAME = "artos_offpolicy"


def workload(quick: bool) -> Workload:
    # two actors (one per core) delivering every 256 steps; artos §6.1's SAC uses 4 actors
    # delivering every 512 steps. DQN on CartPole is unstable after it first learns, so the
    # targets sit below the 500 cap: 150 (quick) and 195 (the classic "solved" level).
    return Workload(
        algorithm="dqn",
        program="workers.actors.gym_programs:dqn",
        actors=2,
        steps=256,
        target_return=150.0 if quick else 195.0,
        window=20,
        max_env_steps=30_000 if quick else 80_000,
        replay_capacity=50_000,
    )


def run(quick: bool = False) -> BenchReport:
    return compare(NAME, quick, workload(quick), repetitions=1 if quick else 5, timeout_s=400)
