"""Per-token latency as a function of batch size: a three-piece linear curve.

Both Heddle (the interference factor α(b), heddle §4/§5.2) and DARTS (PTL(tp, batch), darts App. A)
model decode time per token as piecewise linear in the batch size: flat while the GPU is
memory-bound, then rising once compute saturates. One fit routine and one evaluator serve both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ThreePieceLinear:
    """``f(b)`` continuous piecewise linear with breakpoints ``b1 < b2``.

    ``f(b) = y0 + s0·b`` for ``b ≤ b1``, then slope ``s1`` up to ``b2``, then slope ``s2``.
    """

    y0: float
    slopes: tuple[float, float, float]
    breakpoints: tuple[float, float]

    def __call__(self, batch: float) -> float:
        b1, b2 = self.breakpoints
        s0, s1, s2 = self.slopes
        if batch <= b1:
            return self.y0 + s0 * batch
        at_b1 = self.y0 + s0 * b1
        if batch <= b2:
            return at_b1 + s1 * (batch - b1)
        return at_b1 + s1 * (b2 - b1) + s2 * (batch - b2)

    def evaluate(self, batches: np.ndarray) -> np.ndarray:
        """Vectorised ``f`` over an array of batch sizes."""
        b1, b2 = self.breakpoints
        s0, s1, s2 = self.slopes
        b = np.asarray(batches, dtype=float)
        return (
            self.y0
            + s0 * np.minimum(b, b1)
            + s1 * np.clip(b - b1, 0.0, b2 - b1)
            + s2 * np.maximum(b - b2, 0.0)
        )

    def relative_to(self, batch: float = 1.0) -> ThreePieceLinear:
        """The same curve divided by ``f(batch)``: Heddle's α(b) normalised so α(1) = 1."""
        scale = self(batch)
        return ThreePieceLinear(
            y0=self.y0 / scale,
            slopes=(self.slopes[0] / scale, self.slopes[1] / scale, self.slopes[2] / scale),
            breakpoints=self.breakpoints,
        )


def fit_three_piece_linear(
    batches: Sequence[float], latencies: Sequence[float], grid: int = 24
) -> ThreePieceLinear:
    """Least-squares fit of a continuous three-piece linear curve to profile points (darts App. A).

    Breakpoints are searched over a grid of candidate batch sizes; for each pair the continuous
    hinge basis ``[1, b, (b-b1)+, (b-b2)+]`` makes the fit an ordinary least-squares problem.
    """
    x = np.asarray(batches, dtype=float)
    y = np.asarray(latencies, dtype=float)
    if x.shape != y.shape or x.size < 4:
        raise ValueError("need at least 4 (batch, latency) points of equal length")
    candidates = np.unique(np.quantile(x, np.linspace(0.05, 0.95, grid)))
    best: tuple[float, ThreePieceLinear] | None = None
    for i, b1 in enumerate(candidates):
        for b2 in candidates[i + 1 :]:
            basis = np.stack(
                [np.ones_like(x), x, np.maximum(x - b1, 0.0), np.maximum(x - b2, 0.0)], axis=1
            )
            coef, *_ = np.linalg.lstsq(basis, y, rcond=None)
            error = float(np.sum((basis @ coef - y) ** 2))
            curve = ThreePieceLinear(
                y0=float(coef[0]),
                slopes=(
                    float(coef[1]),
                    float(coef[1] + coef[2]),
                    float(coef[1] + coef[2] + coef[3]),
                ),
                breakpoints=(float(b1), float(b2)),
            )
            if best is None or error < best[0]:
                best = (error, curve)
    assert best is not None
    return best[1]


# Default decode profile (seconds per output token vs running batch size) for one worker with
# tensor-parallel degree 1: flat (memory-bound) to 32, gentle rise to 128, steep beyond — the shape
# of darts Fig. 10 / heddle Fig. 6(b). Values chosen from those figures; real engines supply points.
DEFAULT_PTL_TP1 = ThreePieceLinear(
    y0=0.012, slopes=(0.00002, 0.00008, 0.00022), breakpoints=(32, 128)
)
