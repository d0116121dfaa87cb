"""The discrete-event core every simulator scenario runs on: a virtual clock and an event heap.

Scenarios (Tangram actions, Heddle LLM workers, DARTS rollouts) schedule callbacks at virtual
times; the loop pops them in (time, insertion order) so equal-time events stay deterministic. The
production scheduler, router and shaper classes are driven from these callbacks with ``now`` passed
in, exactly as the real services pass wall-clock time (DESIGN.md "The simulator").
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True)
class _Event:
    time: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class EventHandle:
    """Returned by :meth:`EventLoop.at`; lets a scenario cancel a pending event (a preemption)."""

    __slots__ = ("_event",)

    def __init__(self, event: _Event) -> None:
        self._event = event

    @property
    def time(self) -> float:
        return self._event.time

    def cancel(self) -> None:
        self._event.cancelled = True


class EventLoop:
    """A virtual clock. ``now`` only moves forward, to the time of the event being run."""

    def __init__(self, start: float = 0.0) -> None:
        self.now: float = start
        self._heap: list[_Event] = []
        self._seq = itertools.count()
        self.events_run = 0

    def at(self, time: float, callback: Callable[[], None]) -> EventHandle:
        if time < self.now:
            raise ValueError(f"cannot schedule at {time} before now={self.now}")
        event = _Event(time, next(self._seq), callback)
        heapq.heappush(self._heap, event)
        return EventHandle(event)

    def after(self, delay: float, callback: Callable[[], None]) -> EventHandle:
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        return self.at(self.now + delay, callback)

    def pending(self) -> int:
        return sum(1 for e in self._heap if not e.cancelled)

    def run(self, until: float | None = None, max_events: int | None = None) -> float:
        """Run events in time order until none are left (or ``until`` / ``max_events``)."""
        while self._heap:
            if until is not None and self._heap[0].time > until:
                self.now = until
                break
            event = heapq.heappop(self._heap)
            if event.cancelled:
                continue
            self.now = event.time
            event.callback()
            self.events_run += 1
            if max_events is not None and self.events_run >= max_events:
                break
        return self.now
