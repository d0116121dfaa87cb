"""The trainer side of a disaggregated GRPO step and how rollout output streams to it
(darts §4.3.2, App. E; Fig. 7).

The trainer runs forward passes (the old policy's log-probabilities) on rollout output as it
arrives, then — once the batch is complete, because rewards and GRPO advantages need whole
groups (App. E "hybrid granularity") — the update (forward + backward) on the kept samples.

- ``"none"``: the forward starts when the rollout ends (no overlap);
- ``"sample"``: sample-level streaming (StreamRL, Zhong et al. 2025): a finished sample is
  forwarded at once when its group keeps every candidate, otherwise its group's kept samples
  are forwarded when the group completes (the selection needs the whole pool);
- ``"token"``: token-level streaming: every candidate's tokens are forwarded as they are
  generated (incremental forward with a KV cache, App. E), including candidates later dropped
  or aborted — that compute is spent before the selection is known.

The trainer is a fluid server: given the work arriving over time, the forward finishes at
``max_t [t + (W − A(t)) / r]``. Token-level arrival is taken as uniform over each sample's
decode interval (our approximation: chunk thresholds are small beside response lengths).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from workers.sim.llm.latency import H100_BF16, QWEN3_14B

Streaming = Literal["none", "sample", "token"]


@dataclass(frozen=True)
class TrainerModel:
    """FLOPs per token over the trainer GPUs' achieved throughput.

    Forward ``2·P`` FLOPs per token, forward + backward ``6·P`` (Kaplan et al. 2020, "Scaling
    Laws for Neural Language Models" §2.1). One forward pass per token before the update: the old
    policy's log-probabilities (DAPO, Yu et al. 2025 §3, drops the reference-model KL term).
    ``mfu``: our assumption, below the 46.2 % PaLM reports (Chowdhery et al. 2022, Table 3)
    because RL micro-batches are ragged. The model and GPU are the context engine's (Qwen3-14B,
    H100 bf16); ``gpus``: as many training GPUs as rollout workers (our assumption).
    """

    parameters: float = QWEN3_14B.parameters
    gpus: int = 4
    gpu_flops: float = H100_BF16.flops
    mfu: float = 0.4
    forward_passes: int = 1

    @property
    def _flops_per_second(self) -> float:
        return self.mfu * self.gpu_flops * self.gpus

    @property
    def forward_seconds_per_token(self) -> float:
        return 2.0 * self.parameters * self.forward_passes / self._flops_per_second

    @property
    def update_seconds_per_token(self) -> float:
        return 6.0 * self.parameters / self._flops_per_second


def _fluid_finish(times: np.ndarray, arrived: np.ndarray, total: float) -> float:
    """``max_t [t + total − arrived(t)]`` over candidate instants (``arrived`` in seconds of work
    that arrived strictly before each instant); the server starts at ``t = 0``."""
    return float(max(total, np.max(times + total - arrived, initial=total)))


@dataclass(frozen=True)
class Timeline:
    """One step's rollout as the trainer sees it, per sample: decode ``start``/``finish`` times,
    ``tokens`` generated, ``kept`` in the training batch, ``streamable`` (its group keeps every
    candidate, so it may go at its own finish) and ``group_done`` (its group's completion)."""

    start: np.ndarray
    finish: np.ndarray
    tokens: np.ndarray
    kept: np.ndarray
    streamable: np.ndarray
    group_done: np.ndarray
    rollout_end: float


def forward_finish(mode: Streaming, timeline: Timeline, seconds_per_token: float) -> float:
    """When the trainer's forward passes over this step's rollout output are done."""
    tokens, kept = timeline.tokens.astype(float), timeline.kept
    if mode == "none":
        return timeline.rollout_end + float(tokens[kept].sum()) * seconds_per_token
    if mode == "sample":
        streamable = timeline.streamable
        send = kept | (streamable & (tokens > 0))
        at = np.where(streamable, timeline.finish, timeline.group_done)[send]
        work = tokens[send] * seconds_per_token
        order = np.argsort(at, kind="stable")
        at, work = at[order], work[order]
        before = np.concatenate(([0.0], np.cumsum(work)[:-1]))
        return _fluid_finish(at, before, float(work.sum()))
    if mode == "token":
        live = tokens > 0
        s, f = timeline.start[live], timeline.finish[live]
        work = tokens[live] * seconds_per_token
        instants = np.unique(np.concatenate((s, f)))
        span = np.maximum(f - s, 1e-12)
        share = np.clip((instants[:, None] - s[None, :]) / span[None, :], 0.0, 1.0)
        arrived = share @ work
        return _fluid_finish(instants, arrived, float(work.sum()))
    raise ValueError(f"unknown streaming mode {mode!r}")


def step_seconds(mode: Streaming, trainer: TrainerModel, timeline: Timeline) -> float:
    """One step's wall time: rollout, the (overlapped) forward, then the update on kept tokens."""
    forward = forward_finish(mode, timeline, trainer.forward_seconds_per_token)
    update = float(timeline.tokens[timeline.kept].sum()) * trainer.update_seconds_per_token
    return max(forward, timeline.rollout_end) + update
