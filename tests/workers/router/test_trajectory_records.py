"""What the router records of a trajectory's steps for the length predictor (heddle §4.1)."""

from __future__ import annotations

from workers.router.trajectories import FINISHED, TrajectoryTable


def test_each_step_keeps_its_tokens_and_the_tool_time_after_it() -> None:
    table = TrajectoryTable()
    state = table.open("7", job_id="1", prompt_id="p", group_id="g", prompt_tokens=12)
    table.step_started(state, now=100.0)
    table.step_finished(state, tokens=40, queueing_s=0.0, generation_s=1.0, now=101.0)
    table.step_started(state, now=103.5)  # a tool call of 2.5 s in between
    table.step_finished(state, tokens=60, queueing_s=0.0, generation_s=1.0, now=104.5)
    assert "step_records" not in state.snapshot("step")  # only a finished one carries them
    table.end(state, FINISHED)
    snapshot = state.snapshot("end")
    assert snapshot["prompt_tokens"] == 12
    assert snapshot["step_records"] == [[40, 2.5], [60, 0.0]]
    assert sum(tokens for tokens, _ in snapshot["step_records"]) == snapshot["tokens"]
