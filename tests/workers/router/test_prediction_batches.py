"""Steps that end in the same loop tick are predicted in one batch (heddle §4.1's model costs
milliseconds a call; a batch of many costs about as much as one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from workers.algorithms.heddle.prediction import ProgressivePredictor, PromptHistoryPredictor
from workers.router.trajectories import TrajectoryState, TrajectoryTable
from workers.sim.llm.trajectories import generate_trajectories


def trained_table() -> TrajectoryTable:
    records = generate_trajectories("coding", prompts=6, group_size=4, seed=3)
    history = PromptHistoryPredictor().fit(records)
    return TrajectoryTable(ProgressivePredictor(history, max_iter=30).fit(records))


async def test_steps_ending_in_one_tick_share_one_prediction_and_publish_after_it() -> None:
    table = trained_table()
    states = [
        table.open(f"t{i}", job_id="1", prompt_id="p0", group_id="", prompt_tokens=50 + i)
        for i in range(40)
    ]
    before = [s.predicted_remaining for s in states]
    published: list[float] = []

    def publisher(state: TrajectoryState) -> Callable[[], None]:
        return lambda: published.append(state.predicted_remaining)

    for i, state in enumerate(states):
        table.step_finished(
            state, tokens=30 * (i + 1), queueing_s=0.0, generation_s=0.1, now=1.0,
            then=publisher(state),
        )  # fmt: skip
    assert published == [] and table.batches == 0  # nothing until the tick ends
    await asyncio.sleep(0)
    assert (table.batches, table.batched) == (1, 40)
    assert published == [s.predicted_remaining for s in states]  # each published predicted
    assert [s.predicted_remaining for s in states] != before
    one = TrajectoryTable(table.predictor)
    alone = one.open("x", job_id="1", prompt_id="p0", group_id="", prompt_tokens=50)
    one.step_finished(alone, tokens=30, queueing_s=0.0, generation_s=0.1, now=1.0)
    await asyncio.sleep(0)
    assert alone.predicted_remaining == states[0].predicted_remaining  # the same model answer


def test_a_batch_costs_far_less_than_its_calls_one_by_one() -> None:
    table = trained_table()
    opened = [
        table.open(f"t{i}", job_id="1", prompt_id="p0", group_id="", prompt_tokens=50)
        for i in range(64)
    ]
    contexts = [table.context(state) for state in opened]
    predictor = table.predictor
    predictor.predict_many(contexts[:1])  # warm
    one_by_one = batched = float("inf")
    for _ in range(5):  # the best of several: a preemption on a loaded host slows only one
        started = time.perf_counter()
        for context in contexts:
            predictor.predict(context)
        one_by_one = min(one_by_one, time.perf_counter() - started)
        started = time.perf_counter()
        predictor.predict_many(contexts)
        batched = min(batched, time.perf_counter() - started)
    assert batched < one_by_one / 4, (batched, one_by_one)
