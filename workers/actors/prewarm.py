"""Pre-warming driven by the workload monitor (artos §4.3).

After each iteration the shell reports the actors' start-up overhead (fork request to restored,
averaged) and the learner's finish time (from the iteration's invocation). Once the monitor
declares the workload stable, the next iteration's actors are forked and restored at
``iteration start + pre-warm threshold``, so they wait, warm, for the new parameters instead of
the parameters waiting for them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence

from workers.actors.pool import ActorPool, ActorState, Invocation
from workers.algorithms.artos import MonitorReading, WorkloadMonitor


def actor_start_overhead(invocations: Iterable[Invocation]) -> float:
    """Mean fork-request-to-ready time of an iteration's actors (``avg_actor_start_time``)."""
    spans = [
        i.ready_at - i.requested_at
        for i in invocations
        if i.ready_at is not None and i.requested_at
    ]
    return sum(spans) / len(spans) if spans else 0.0


class Prewarmer:
    """Arms a timer per iteration that pre-warms the given actors at the monitor's threshold."""

    def __init__(self, pool: ActorPool, monitor: WorkloadMonitor | None = None) -> None:
        self.pool = pool
        self.monitor = monitor or WorkloadMonitor()
        self._timer: threading.Thread | None = None
        self._cancel = threading.Event()
        self.last_reading = MonitorReading(False, None)

    def record(self, invocations: Iterable[Invocation], learner_fin: float) -> MonitorReading:
        """One iteration ended: its actors' start-up overhead, its learner's finish time."""
        self.last_reading = self.monitor.record(actor_start_overhead(invocations), learner_fin)
        return self.last_reading

    def arm(self, iteration_start: float, actors: Sequence[str]) -> float | None:
        """Schedule the next pre-warm; returns its absolute time, or None while unstable."""
        self.cancel()
        threshold = self.monitor.prewarm_threshold()
        if threshold is None:
            return None
        at = iteration_start + threshold
        self._cancel = threading.Event()
        cancel = self._cancel

        def run() -> None:
            delay = at - time.monotonic()
            if delay > 0 and cancel.wait(delay):
                return
            pending = list(actors)
            while pending and not cancel.is_set():
                # an actor still sampling this iteration is pre-warmed once it checkpointed
                pending = [a for a in pending if not self._try_prewarm(a)]
                if pending:
                    cancel.wait(0.002)

        self._timer = threading.Thread(target=run, name="prewarm", daemon=True)
        self._timer.start()
        return at

    def _try_prewarm(self, actor: str) -> bool:
        state = self.pool.states()[actor]
        if state in (ActorState.PREWARMING, ActorState.WARM):
            return True
        return self.pool.prewarm(actor)

    def cancel(self) -> None:
        self._cancel.set()
        if self._timer is not None:
            self._timer.join(timeout=5)
            self._timer = None
