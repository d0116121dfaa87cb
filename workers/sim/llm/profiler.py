"""Heddle's profiler (heddle §5.2 "Interference Factor", §6): what the placement DP and the
resource annealer believe about the engine.

The paper profiles per-token time across batch sizes and feeds the curves to its planners. Here
the "engine" is :class:`~workers.sim.llm.latency.ContextLatencyModel`; it is profiled at the
workload's mean context (from the previous epoch), every request of a batch holding that context,
and the planners' :class:`~workers.algorithms.heddle.latency_model.MPLatencyModel` is fitted to
it: a three-piece PTL per MP degree (``per_degree=True``, the paper's profiler) or one MP-1 curve
with an Amdahl κ (``per_degree=False``, one number for every degree). Either way the planners'
view is close but imperfect, as a real profiler's: the engine's cost also depends on each
batch's actual context, which the planners cannot know in advance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workers.algorithms.heddle.latency_model import MP_DEGREES, MPLatencyModel
from workers.algorithms.latency import ThreePieceLinear, fit_three_piece_linear
from workers.sim.llm.latency import ContextLatencyModel


def profiled_batches(max_batch: int) -> list[float]:
    return [float(b) for b in np.unique(np.round(np.geomspace(1, max(max_batch, 4), 24)))]


def fit_kappa(
    model: ContextLatencyModel,
    mean_context: float,
    batches: Sequence[float],
    degrees: Sequence[int] = MP_DEGREES,
) -> float:
    """Least-squares κ of ``m · PTL(b, m) / PTL(b, 1) − 1 = κ (m − 1)`` over batches and degrees."""
    numerator = denominator = 0.0
    for b in batches:
        single = model.step_seconds(1, int(b), b * mean_context)
        for m in degrees:
            if m == 1:
                continue
            ratio = m * model.step_seconds(m, int(b), b * mean_context) / single - 1.0
            numerator += ratio * (m - 1)
            denominator += (m - 1) ** 2
    return max(numerator / denominator, 0.0) if denominator else 0.0


def profile_planner_model(
    model: ContextLatencyModel,
    *,
    mean_context: float,
    mean_prefill_tokens: float,
    max_batch: int,
    degrees: Sequence[int] = MP_DEGREES,
    per_degree: bool = True,
    context_aware: bool = False,
) -> MPLatencyModel:
    """The planners' :class:`MPLatencyModel` fitted to ``model`` at the workload's mean context
    (``mean_prefill_tokens``: a typical prefill, for the prefill cost per token); degree ``m`` is
    profiled up to its batch cap ``m · max_batch``.

    ``context_aware``: the PTL curves are profiled without context and the KV read time per
    token and the KV pool of every degree are measured beside them (``kv_profile``), so the
    placement can charge each member's own context (``placement``'s context charge) instead of
    the mean one."""
    profiled_context = 0.0 if context_aware else mean_context

    def curve(m: int) -> ThreePieceLinear:
        batches = profiled_batches(max_batch * m)
        ptl = [model.step_seconds(m, int(b), b * profiled_context) for b in batches]
        return fit_three_piece_linear(batches, ptl)

    batches = profiled_batches(max_batch)
    return MPLatencyModel(
        base=curve(1),
        profiled=tuple((m, curve(m)) for m in degrees) if per_degree else (),
        comm_overhead=fit_kappa(model, mean_context, batches, degrees),
        prefill_seconds_per_token=model.prefill_seconds_per_token(
            1, mean_prefill_tokens, mean_context
        ),
        kv_bytes_per_token=model.model.kv_bytes_per_token,
        migration_bytes_per_s=model.migration_bytes_per_s,
        migration_fixed_s=model.migration_fixed_s,
        kv_profile=(
            tuple((m, model.kv_seconds_per_token(m), model.kv_capacity_tokens(m)) for m in degrees)
            if context_aware
            else ()
        ),
    )
