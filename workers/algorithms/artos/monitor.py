"""The analytical workload monitor (artos §4.3): when to pre-warm actors.

Per training workload it keeps the last ``window`` (default 5) actor start-up times
(``actor_starts``) and learner completion times (``learner_fins``, measured from the iteration's
actor invocation). The workload is *stable* when the range of ``learner_fins`` is below
``λ × mean(learner_fins)`` (λ = 0.2). Once stable, the pre-warm threshold is

    min(learner_fins) − max(actor_starts) − Δ_interval

with Δ_interval the range of the per-iteration intervals ``learner_fins[i] − actor_starts[i]``:
the time after an iteration's invocation at which the next iteration's actors should start
warming, so they are ready when the learner publishes new parameters.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


class MonitorError(ValueError):
    """Bad monitor parameter or sample; the message names the field."""


@dataclass(frozen=True)
class MonitorReading:
    stable: bool
    prewarm_threshold: float | None  # seconds after the invocation; None while unstable


class WorkloadMonitor:
    """Sliding-window stability and pre-warm threshold (artos §4.3). Pure: times are inputs."""

    def __init__(self, window: int = 5, stability: float = 0.2) -> None:
        if window < 2:
            raise MonitorError(f"window: expected at least 2 samples, got {window}")
        if stability <= 0:
            raise MonitorError(f"stability: expected λ > 0, got {stability}")
        self.window, self.stability = window, stability
        self.actor_starts: deque[float] = deque(maxlen=window)
        self.learner_fins: deque[float] = deque(maxlen=window)

    def record(self, actor_start: float, learner_fin: float) -> MonitorReading:
        """One finished iteration: its actors' (average) start-up time and learner finish time."""
        for name, value in (("actor_start", actor_start), ("learner_fin", learner_fin)):
            if not value >= 0:
                raise MonitorError(f"{name}: expected a non-negative duration, got {value}")
        if learner_fin < actor_start:
            raise MonitorError(
                f"learner_fin: {learner_fin} is before the actors started ({actor_start})"
            )
        self.actor_starts.append(actor_start)
        self.learner_fins.append(learner_fin)
        return self.reading()

    @property
    def stable(self) -> bool:
        fins = self.learner_fins
        if len(fins) < self.window:
            return False
        mean = sum(fins) / len(fins)
        return max(fins) - min(fins) < self.stability * mean

    def prewarm_threshold(self) -> float | None:
        if not self.stable:
            return None
        intervals = [f - s for s, f in zip(self.actor_starts, self.learner_fins, strict=True)]
        delta_interval = max(intervals) - min(intervals)
        threshold = min(self.learner_fins) - max(self.actor_starts) - delta_interval
        return max(0.0, threshold)

    def reading(self) -> MonitorReading:
        return MonitorReading(self.stable, self.prewarm_threshold())
