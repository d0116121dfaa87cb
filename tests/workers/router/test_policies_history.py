"""The length predictor the routing policies rank by, started from a recorded history trace
(``python -m workers.router --history-trace``; heddle §4.1)."""

from __future__ import annotations

from pathlib import Path

from workers.algorithms.heddle.prediction import ProgressivePredictor, PromptHistoryPredictor
from workers.router.__main__ import parse_args, trajectory_table
from workers.sim.llm.trajectories import generate_trajectories, write_jsonl


def _trace(tmp_path: Path) -> tuple[Path, dict[str, float]]:
    records = generate_trajectories("coding", prompts=3, group_size=4, seed=5)
    path = tmp_path / "history.jsonl"
    write_jsonl(records, path)
    totals: dict[str, list[int]] = {}
    for record in records:
        totals.setdefault(record.prompt_id, []).append(record.total_tokens)
    return path, {prompt: sum(v) / len(v) for prompt, v in totals.items()}


def test_without_history_the_table_starts_from_the_empty_prior() -> None:
    table = trajectory_table(None, "prompt_history")
    assert table.predictor is table.history


def test_history_trace_gives_each_prompt_its_recorded_mean(tmp_path: Path) -> None:
    path, means = _trace(tmp_path)
    table = trajectory_table(path, "prompt_history")
    assert isinstance(table.predictor, PromptHistoryPredictor)
    for prompt, mean in means.items():
        state = table.open(
            f"{prompt}-new", job_id="7", prompt_id=prompt, group_id=None, prompt_tokens=500
        )
        assert abs(state.predicted_total - mean) < 1e-6
        table.step_finished(state, tokens=100, queueing_s=0.0, generation_s=1.0, now=1.0)
        assert abs(state.predicted_total - max(mean, 101.0)) < 1e-6  # remaining = mean − so far


def test_progressive_predictor_is_trained_on_the_trace(tmp_path: Path) -> None:
    path, means = _trace(tmp_path)
    table = trajectory_table(path, "progressive")
    assert isinstance(table.predictor, ProgressivePredictor)
    prompt = next(iter(means))
    state = table.open("t", job_id="7", prompt_id=prompt, group_id=None, prompt_tokens=500)
    assert state.predicted_remaining >= 1.0


def test_the_cli_takes_a_history_trace_and_a_predictor(tmp_path: Path) -> None:
    args = parse_args(
        ["--open", "--worker", "http://127.0.0.1:9", "--history-trace", str(tmp_path / "h.jsonl"),
         "--predictor", "progressive"]
    )  # fmt: skip
    assert args.history_trace == tmp_path / "h.jsonl" and args.predictor == "progressive"
    assert parse_args(["--open", "--worker", "http://127.0.0.1:9"]).history_trace is None
