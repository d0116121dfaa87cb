"""Every trajectory calls the APIs directly and retries on rate-limit errors (arl-tangram §6.1)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from workers.algorithms.tangram import BasicLimit
from workers.sim.events import EventLoop
from workers.sim.tangram.baselines.walker import TrajectoryWalker
from workers.sim.tangram.results import ActionRecord, SimResult
from workers.sim.tangram.runner import RateLimitedApi, pool_for
from workers.sim.tangram.trace import ActionTemplate, Trace


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
    walker = TrajectoryWalker(loop, trace)
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
            record.attempts = tries + 1
            if api.admit(loop.now):
                if math.isnan(record.started):
                    record.started = loop.now

                def done() -> None:
                    api.finish()
                    walker.finish(index, step, record)

                loop.after(template.t1, done)
                return
            if tries >= p.max_retries:
                record.failed = True  # rejected on its first try and on every retry
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
