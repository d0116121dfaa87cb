"""ARTOS vs Ray on on-policy training (artos §6.2, Fig. 12 a-b, Fig. 14): PPO on CartPole-v1,
the same actor program, learner and hyper-parameters in both systems, until the mean return of
the last ``window`` episodes reaches the target.

Loom runs it as an ARTOS workflow (elastic actors forked from a zygote, itself forked from the
run's process (``_artos_loom.ZYGOTE_START``), checkpointed after each invocation and kept warm
for ``_artos_loom.KEEP_WARM_S`` after it, triggers on the rollout buffer, an on-demand learner);
Ray as actors alive for the whole run with ``ray.get`` of the sample batches and the driver as
learner. Targets (issue 20): >= 30 % fewer CPU-seconds (all processes of each system) and
learner device-seconds to the same return, end-to-end time no worse than Ray's, the same
learning per environment step.
"""

from __future__ import annotations

from bench._artos_compare import compare
from bench._artos_workload import Workload
from bench.report import BenchReport

NAME = "artos_ppo"


def workload(quick: bool) -> Workload:
    # four actors (two per core of this machine) of 128 steps per iteration; artos §6.1 uses
    # 16 x 512 on 8-vCPU workers. CartPole-v1's return is capped at 500.
    return Workload(
        algorithm="ppo",
        program="workers.actors.gym_programs:ppo",
        actors=4,
        steps=128,
        target_return=100.0 if quick else 475.0,
        window=20,
        max_env_steps=30_000 if quick else 200_000,
    )


def run(quick: bool = False) -> BenchReport:
    return compare(NAME, quick, workload(quick), repetitions=1 if quick else 5, timeout_s=300)
