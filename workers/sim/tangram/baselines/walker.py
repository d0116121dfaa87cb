"""Walks each trajectory of a trace through its steps on a baseline's event loop."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from workers.sim.events import EventLoop
from workers.sim.tangram.results import ActionRecord, SimResult
from workers.sim.tangram.trace import ActionTemplate, Trace


class TrajectoryWalker:
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
