"""The trainer's side of ``router_heddle_live``: play every trajectory of a trace through the
router, live (heddle §2.1, Fig. 1: generation step → tool call → next step).

All trajectories start at once (one synchronous rollout batch, as the simulator starts them at
t = 0). Step ``k`` of a trajectory is one non-streaming ``/v1/completions`` request whose prompt
holds the trajectory's whole context so far (prompt + earlier outputs + tool outputs, one word
per token: the emulated engine counts words) and whose ``max_tokens`` is the trace's output
length for that step. The context is built as a trainer builds it: the trajectory's own prompt
(its first word names it, so no two trajectories share a prefix: the simulator keys its prefix
cache per trajectory), then each answer's text as the engine returned it and the tool's output,
so the engine's prefix cache finds the earlier steps as SGLang's would. The tool call between
steps is a sleep of the trace's tool time, scaled like the engine's clock. The trajectory then
ends through the router (``…/end``), which frees its place in Heddle's ranking.

The client must not be what limits the rollout: it measures its own lag — how late each tool
sleep wakes, and a probe that wakes every ``probe_s`` — beside the results.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.algorithms.heddle.prediction import TrajectoryRecord
from workers.router.upstream import Upstream

HEADERS = ((b"content-type", b"application/json"),)


@dataclass
class PlayedTrajectory:
    trajectory_id: str
    tokens: int = 0
    steps: int = 0
    finished_at: float = 0.0
    completed: bool = False
    error: str | None = None


@dataclass
class ClientRun:
    makespan_s: float
    trajectories: list[PlayedTrajectory]
    tool_wake_late_s: list[float] = field(default_factory=list)
    probe_late_s: list[float] = field(default_factory=list)
    cpu_s: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.trajectories)

    @property
    def completed(self) -> int:
        return sum(t.completed for t in self.trajectories)

    def lag_summary(self) -> dict[str, float]:
        def quantiles(values: list[float]) -> dict[str, float]:
            if not values:
                return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
            ordered = sorted(values)
            return {
                "p50_ms": statistics.median(ordered) * 1e3,
                "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3,
                "max_ms": ordered[-1] * 1e3,
            }

        tool = quantiles(self.tool_wake_late_s)
        probe = quantiles(self.probe_late_s)
        return {
            **{f"tool_wake_late_{k}": v for k, v in tool.items()},
            **{f"loop_probe_late_{k}": v for k, v in probe.items()},
        }


def _body(record: TrajectoryRecord, model: str, context: str, output_tokens: int) -> bytes:
    return json.dumps(
        {
            "model": model,
            "prompt": context,
            "max_tokens": output_tokens,
            "loom_trajectory": record.trajectory_id,
            "loom_prompt": record.prompt_id,
            "loom_group": record.group_id,
        },
        separators=(",", ":"),
    ).encode()


async def _play(
    upstream: Upstream,
    record: TrajectoryRecord,
    *,
    model: str,
    time_scale: float,
    started: float,
    late: list[float],
) -> PlayedTrajectory:
    played = PlayedTrajectory(record.trajectory_id)
    context = f"t{record.trajectory_id}" + " x" * (record.prompt_tokens - 1)
    try:
        for index, step in enumerate(record.steps):
            body = _body(record, model, context, step.output_tokens)
            response = await upstream.request("POST", "/v1/completions", body, HEADERS)
            payload = await response.read()
            if response.status != 200:
                raise RuntimeError(f"step {index}: HTTP {response.status}: {payload[:200]!r}")
            answer = json.loads(payload)
            played.tokens += int(answer["usage"]["completion_tokens"])
            played.steps += 1
            if index + 1 < len(record.steps):  # the last step ends the trajectory: no tool
                pause = step.tool_seconds * time_scale
                wake = time.perf_counter() + pause
                await asyncio.sleep(pause)
                late.append(max(0.0, time.perf_counter() - wake))
            context += answer["choices"][0]["text"] + " y" * step.tool_output_tokens
        played.finished_at = time.perf_counter() - started
        end = await upstream.request(
            "POST", f"/v1/loom/trajectories/{record.trajectory_id}/end",
            b'{"status":"finished"}', HEADERS,
        )  # fmt: skip
        await end.read()
        played.completed = played.steps == len(record.steps)
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        played.error = f"{type(exc).__name__}: {exc}"
    return played


async def _probe(late: list[float], period_s: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        wake = time.perf_counter() + period_s
        await asyncio.sleep(period_s)
        late.append(max(0.0, time.perf_counter() - wake))


async def play_trace(
    router_url: str,
    records: Sequence[TrajectoryRecord],
    *,
    model: str,
    time_scale: float,
    probe_s: float = 0.01,
) -> ClientRun:
    """Every trajectory of ``records`` through the router at ``router_url``, all started at once;
    the makespan is the last trajectory's end (wall seconds)."""
    upstream = Upstream(router_url)
    tool_late: list[float] = []
    probe_late: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.ensure_future(_probe(probe_late, probe_s, stop))
    cpu_before = time.process_time()
    started = time.perf_counter()
    played = await asyncio.gather(
        *(
            _play(upstream, r, model=model, time_scale=time_scale, started=started, late=tool_late)
            for r in records
        )
    )
    makespan = max((p.finished_at for p in played), default=0.0)
    stop.set()
    await probe
    cpu = time.process_time() - cpu_before
    await upstream.close()
    return ClientRun(makespan, list(played), tool_late, probe_late, cpu)


def describe(run: ClientRun, time_scale: float) -> dict[str, Any]:
    """One run's figures; ``model_`` ones are in the engine model's seconds (wall / scale)."""
    errors = [p.error for p in run.trajectories if p.error]
    return {
        "makespan_wall_s": run.makespan_s,
        "makespan_model_s": run.makespan_s / time_scale,
        "tokens": run.tokens,
        "throughput_tokens_per_model_s": run.tokens * time_scale / run.makespan_s
        if run.makespan_s > 0
        else 0.0,
        "trajectories": len(run.trajectories),
        "completed": run.completed,
        "errors": errors[:5],
        "error_count": len(errors),
        "client_cpu_s": run.cpu_s,
        **run.lag_summary(),
    }
