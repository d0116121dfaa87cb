"""The router's in-memory trajectory table (heddle §3–§4: the trajectory, not the request, is the
unit of scheduling).

A trajectory is a sequence of steps — one generation request each, separated by tool calls. The
router sees every step's start (the request arriving) and end (the response finishing), so it
keeps per trajectory: steps and tokens so far, the time spent queueing (arrival to first token),
generating (first token to end) and in tools (one step's end to the next step's start), its
worker, and the predicted remaining length — re-estimated after every step from the runtime
context (progressive prediction, heddle §4.1) by the one predictor implementation in
``workers.algorithms.heddle.prediction``. For a new job that is the prompt-history prior
(:class:`PromptHistoryPredictor`), fed with every finished trajectory's length; a trained
:class:`ProgressivePredictor` plugs in through the same protocol.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workers.algorithms.heddle.prediction import (
    LengthPredictor,
    PromptHistoryPredictor,
    TrajectoryContext,
)

GROUPS_KEPT = 50_000  # sample groups whose finished lengths feed the predictor; then it restarts
PENDING = "pending"
GENERATING = "generating"
TOOL_CALL = "tool_call"
FINISHED = "finished"
ABORTED = "aborted"
FAILED = "failed"
TERMINAL = frozenset({FINISHED, ABORTED, FAILED})


@dataclass(eq=False)
class TrajectoryState:
    trajectory_id: str
    job_id: str
    prompt_id: str
    group_id: str
    created_at: float
    status: str = PENDING
    prompt_tokens: int = 0
    steps: int = 0
    tokens: int = 0
    queueing_s: float = 0.0
    generation_s: float = 0.0
    tool_s: float = 0.0
    worker: str | None = None
    priority: int = 0
    predicted_remaining: float = 0.0
    migrations: int = 0
    last_step_end: float | None = None
    in_flight: set[str] = field(default_factory=set)
    # Per completed step: its output tokens, and the tool time until the next step started —
    # the recorded trajectory the control plane trains the length predictor on (heddle §4.1).
    step_tokens: list[int] = field(default_factory=list)
    step_tool_s: list[float] = field(default_factory=list)

    @property
    def first_step_tokens(self) -> int | None:
        return self.step_tokens[0] if self.step_tokens else None

    @property
    def last_step_tokens(self) -> int | None:
        return self.step_tokens[-1] if self.step_tokens else None

    @property
    def predicted_total(self) -> float:
        return self.tokens + self.predicted_remaining

    def snapshot(self, event: str) -> dict[str, Any]:
        """The whole state as published on the state stream (the ``Trajectory`` row's fields)."""
        end = self.last_step_end if self.status in TERMINAL and self.last_step_end else None
        total = (end or time.monotonic()) - self.created_at
        return {
            "event": event,
            "trajectory": self.trajectory_id,
            "job": self.job_id,
            "status": self.status,
            "steps": self.steps,
            "tokens": self.tokens,
            "predicted_remaining_tokens": round(self.predicted_remaining),
            "llm_worker": self.worker or "",
            "priority": self.priority,
            "migrations": self.migrations,
            "queueing_s": round(self.queueing_s, 6),
            "generation_s": round(self.generation_s, 6),
            "tool_s": round(self.tool_s, 6),
            "total_s": round(total, 6),
            "at": time.time(),
        } | (self.record() if self.status == FINISHED else {})

    def record(self) -> dict[str, Any]:
        """A finished trajectory's steps, as the predictor's training trace keeps them."""
        pairs = zip(self.step_tokens, self.step_tool_s, strict=True)
        steps = [[tokens, round(tool, 6)] for tokens, tool in pairs]
        return {"prompt_tokens": self.prompt_tokens, "step_records": steps}


class TrajectoryTable:
    """Trajectories the router has seen, by id; finished ones leave (their final state is
    published), and their lengths feed the predictor's prompt history."""

    def __init__(self, predictor: LengthPredictor | None = None) -> None:
        self.history = PromptHistoryPredictor()
        self.predictor: LengthPredictor = predictor or self.history
        self.active: dict[str, TrajectoryState] = {}
        self._pending: list[tuple[TrajectoryState, Callable[[], None] | None]] = []
        self.batches = 0  # prediction batches made, and the steps they held
        self.batched = 0
        self._group_finished: dict[str, list[int]] = defaultdict(list)

    def __len__(self) -> int:
        return len(self.active)

    def get(self, trajectory_id: str) -> TrajectoryState | None:
        return self.active.get(trajectory_id)

    def open(
        self,
        trajectory_id: str,
        *,
        job_id: str,
        prompt_id: str | None,
        group_id: str | None,
        prompt_tokens: int,
    ) -> TrajectoryState:
        state = self.active.get(trajectory_id)
        if state is None:
            state = TrajectoryState(
                trajectory_id=trajectory_id,
                job_id=job_id,
                prompt_id=prompt_id or trajectory_id,
                group_id=group_id or "",
                created_at=time.monotonic(),
                prompt_tokens=prompt_tokens,
            )
            state.predicted_remaining = self.predict(state)
            self.active[trajectory_id] = state
        return state

    def context(self, state: TrajectoryState) -> TrajectoryContext:
        return TrajectoryContext(
            prompt_id=state.prompt_id,
            prompt_tokens=state.prompt_tokens,
            steps_done=state.steps,
            tokens_so_far=state.tokens,
            tool_seconds_so_far=state.tool_s,
            first_step_tokens=state.first_step_tokens,
            last_step_tokens=state.last_step_tokens,
            group_finished_lengths=tuple(self._group_finished.get(state.group_id, ())),
            trajectory_id=state.trajectory_id,
        )

    def predict(self, state: TrajectoryState) -> float:
        return float(self.predictor.predict(self.context(state)))

    def step_started(self, state: TrajectoryState, now: float) -> None:
        if state.last_step_end is not None:
            gap = max(0.0, now - state.last_step_end)
            state.tool_s += gap
            if state.step_tool_s:
                state.step_tool_s[-1] += gap
        state.status = GENERATING

    def step_finished(
        self,
        state: TrajectoryState,
        *,
        tokens: int,
        queueing_s: float,
        generation_s: float,
        now: float,
        then: Callable[[], None] | None = None,
    ) -> None:
        """One step's response ended: progress, timings, and a fresh prediction (heddle §4.1).

        The prediction is made in a batch at the end of this loop tick, with every other step
        that ended in the same tick (one ``predict_many``; a per-call model costs milliseconds,
        a batch of many about as much as one): ``then`` runs once it is in. Outside a running
        loop it is made at once."""
        state.steps += 1
        state.tokens += tokens
        state.step_tokens.append(tokens)
        state.step_tool_s.append(0.0)
        state.queueing_s += queueing_s
        state.generation_s += generation_s
        state.last_step_end = now
        if state.status not in TERMINAL:
            state.status = TOOL_CALL if not state.in_flight else GENERATING
        self._pending.append((state, then))
        if len(self._pending) == 1:
            try:
                asyncio.get_running_loop().call_soon(self.predict_pending)
            except RuntimeError:  # no loop (a synchronous caller): now
                self.predict_pending()

    def predict_pending(self) -> int:
        """Predict every step that ended since the last batch, in one call; how many."""
        pending, self._pending = self._pending, []
        if not pending:
            return 0
        values = self.predictor.predict_many([self.context(state) for state, _ in pending])
        self.batches += 1
        self.batched += len(pending)
        for (state, then), value in zip(pending, values, strict=True):
            state.predicted_remaining = float(value)
            if then is not None:
                then()
        return len(pending)

    def idle(self, now: float, idle_s: float) -> list[TrajectoryState]:
        """Trajectories with nothing in flight whose last step ended ``idle_s`` ago or more (a
        trainer that never said ``end``): the router stops holding them."""
        return [
            state
            for state in self.active.values()
            if not state.in_flight and now - (state.last_step_end or state.created_at) >= idle_s
        ]

    def end(self, state: TrajectoryState, status: str) -> None:
        """The trajectory is over: it leaves the table; a finished one teaches the prior."""
        state.status = status
        state.last_step_end = state.last_step_end or time.monotonic()
        self.active.pop(state.trajectory_id, None)
        if status == FINISHED:
            self.history.observe(state.prompt_id, state.tokens)
            if state.group_id:
                if len(self._group_finished) >= GROUPS_KEPT:
                    self._group_finished.clear()
                self._group_finished[state.group_id].append(state.tokens)
