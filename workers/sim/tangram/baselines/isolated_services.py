"""Task-level isolated GPU services, SGLang-like (arl-tangram §6.1), and the ServerlessLLM-like
restore speed (§6.3)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from workers.sim.events import EventLoop
from workers.sim.tangram.baselines.walker import TrajectoryWalker
from workers.sim.tangram.results import ActionRecord, SimResult
from workers.sim.tangram.trace import ActionTemplate, Trace

SERVERLESS_LOAD_MULTIPLIER = 3.0


def simulate_isolated_services(trace: Trace, gpus_per_service: int = 4) -> SimResult:
    """Each service on its own ``gpus_per_service`` GPUs, FCFS, one request at a time."""
    loop = EventLoop()
    walker = TrajectoryWalker(loop, trace)
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
