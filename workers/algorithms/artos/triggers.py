"""ARTOS trigger primitives (artos §4.2, Table 3), evaluated on buffer change events.

A trigger is bound to one buffer and checked every time that buffer's data changes (and on clock
ticks, for ``TimeTrigger``). It sees the buffer through the small read-only ``BufferView`` protocol
and returns the firings it owes, each a plain message dict that a message passer (direct call,
local queue or remote socket) delivers; the passing is the shell's business, not this module's.

Semantics, as Table 3 uses them:

- ``DataKeyTrigger(n, size, keys)`` fires once ``n`` actors each hold ``size`` fresh steps of every
  key in ``keys``; the firing names those actors and consumes ``size`` steps of each, so the same
  data never fires twice. ``n = num_envs`` is the full-batch update, ``n = 1`` FIFO training, and
  two triggers on disjoint ``keys`` the pipelined (dual-stage) learner.
- ``ObjectKeyTrigger(key)`` fires once per new version of a model-data object (``model_param``):
  on-policy synchronisation and actor invocation.
- ``TimeTrigger(period)`` fires when ``period`` has passed since its last firing: temporal
  training and off-policy synchronisation.
- ``TransferTrigger(keys)`` lives on an actor's cache buffer; ``keys`` is a sequence of stages
  (a key or a tuple of keys each) sent in order: stage ``i`` is sent for an actor once its data for
  that stage reached ``size`` steps and stage ``i − 1`` was sent (the dual-stage pipeline).

Pure: time arrives as ``BufferEvent.now``; no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol


class TriggerError(ValueError):
    """A trigger declared with an invalid parameter; the message names the parameter."""


class EventKind(StrEnum):
    DATA = "data"  # steps of one key appended for one actor
    OBJECT = "object"  # a model-data object (parameters, noise scale) written
    TICK = "tick"  # the clock moved; only time-based triggers care
    RESET = "reset"  # an actor's data dropped (on-policy: a new iteration starts)


@dataclass(frozen=True)
class BufferEvent:
    """One change of a buffer: which actor/key (or object key) changed, and when."""

    kind: EventKind
    now: float
    actor: str | None = None
    key: str | None = None


class BufferView(Protocol):
    """What a trigger may read from its buffer."""

    def steps(self, actor: str, key: str) -> int:
        """Steps of ``key`` written by ``actor`` since the buffer was created (monotone)."""
        ...

    def actors(self) -> Sequence[str]:
        """Actors that have written, in first-write order."""
        ...

    def object_version(self, key: str) -> int:
        """How many times the model-data object ``key`` was written (0: never)."""
        ...


Firing = dict[str, Any]


class Trigger(Protocol):
    """A trigger primitive: returns the firings one buffer change owes (empty: not satisfied)."""

    def check(self, view: BufferView, event: BufferEvent) -> list[Firing]: ...


def _keys(value: Iterable[str] | str, field: str) -> tuple[str, ...]:
    keys = (value,) if isinstance(value, str) else tuple(value)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise TriggerError(f"{field}: expected one or more non-empty key names, got {value!r}")
    if len(set(keys)) != len(keys):
        raise TriggerError(f"{field}: duplicate key in {keys!r}")
    return keys


def _positive_int(value: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TriggerError(f"{field}: expected a positive integer, got {value!r}")
    return value


class DataKeyTrigger:
    """artos §4.2: fires when ``n`` actors each collected ``size`` steps of every key in ``keys``.

    Each actor has a consumed offset per trigger; an actor is *ready* when it holds ``size``
    unconsumed steps of every key. Ready actors fire in the order they became ready (FIFO), so
    ``n = 1`` serves actors in arrival order, as IMPALA-style FIFO training needs.
    """

    kind = "data_key"

    def __init__(self, n: int, size: int, keys: Iterable[str] | str) -> None:
        self.n = _positive_int(n, "n")
        self.size = _positive_int(size, "size")
        self.keys = _keys(keys, "keys")
        self._consumed: dict[str, int] = {}
        self._ready: list[str] = []

    def _is_ready(self, view: BufferView, actor: str) -> bool:
        base = self._consumed.get(actor, 0)
        return all(view.steps(actor, key) - base >= self.size for key in self.keys)

    def check(self, view: BufferView, event: BufferEvent) -> list[Firing]:
        if event.kind is EventKind.RESET and event.actor is not None:
            self._consumed[event.actor] = min(view.steps(event.actor, k) for k in self.keys)
            if event.actor in self._ready:
                self._ready.remove(event.actor)
            return []
        if event.kind is not EventKind.DATA or event.key not in self.keys:
            return []
        actor = event.actor
        if actor is not None and actor not in self._ready and self._is_ready(view, actor):
            self._ready.append(actor)
        firings: list[Firing] = []
        while len(self._ready) >= self.n:
            chosen, self._ready = self._ready[: self.n], self._ready[self.n :]
            slices = {}
            for name in chosen:
                start = self._consumed.get(name, 0)
                self._consumed[name] = start + self.size
                slices[name] = (start, start + self.size)
            firings.append(
                {"trigger": self.kind, "keys": list(self.keys), "actors": slices, "at": event.now}
            )
            # an actor with more than one batch waiting is ready again at once
            for name in chosen:
                if self._is_ready(view, name):
                    self._ready.append(name)
        return firings


class ObjectKeyTrigger:
    """artos §4.2: fires once per new version of the model-data object ``key``."""

    kind = "object_key"

    def __init__(self, key: str) -> None:
        self.key = _keys(key, "key")[0]
        self._seen_version = 0

    def check(self, view: BufferView, event: BufferEvent) -> list[Firing]:
        if event.kind is not EventKind.OBJECT or event.key != self.key:
            return []
        version = view.object_version(self.key)
        if version <= self._seen_version:
            return []
        self._seen_version = version
        return [{"trigger": self.kind, "key": self.key, "version": version, "at": event.now}]


class TimeTrigger:
    """artos §4.2: fires when ``period`` has passed since its last firing (or its first check).

    Checked on every event, ticks included; a late check fires once, not once per missed period
    (a learner that fell behind should sample once, not catch up in a burst).
    """

    kind = "time"

    def __init__(self, period: float) -> None:
        if not isinstance(period, int | float) or not math.isfinite(period) or period <= 0:
            raise TriggerError(f"period: expected a positive number of seconds, got {period!r}")
        self.period = float(period)
        self._last: float | None = None

    def check(self, view: BufferView, event: BufferEvent) -> list[Firing]:
        if self._last is None:
            self._last = event.now
            return []
        if event.now - self._last < self.period:
            return []
        self._last = event.now
        return [{"trigger": self.kind, "period": self.period, "at": event.now}]


class TransferTrigger:
    """artos §4.2, §4.4: on a cache buffer, sends each actor's data stage by stage, in order.

    ``keys`` is a sequence of stages; a stage is one key or a tuple of keys. Stage ``i`` of a batch
    (``size`` steps) goes once all its keys reached the batch's end and stage ``i − 1`` went.
    """

    kind = "transfer"

    def __init__(self, keys: Sequence[str | Sequence[str]], size: int = 1) -> None:
        if isinstance(keys, str) or not keys:
            raise TriggerError(f"keys: expected a sequence of stages, got {keys!r}")
        self.stages = tuple(_keys(stage, f"keys[{i}]") for i, stage in enumerate(keys))
        flat = [k for stage in self.stages for k in stage]
        if len(set(flat)) != len(flat):
            raise TriggerError(f"keys: a key appears in two stages: {keys!r}")
        self.size = _positive_int(size, "size")
        self._next_stage: dict[str, int] = {}
        self._batch: dict[str, int] = {}

    def check(self, view: BufferView, event: BufferEvent) -> list[Firing]:
        if event.kind is not EventKind.DATA or event.actor is None:
            return []
        actor = event.actor
        firings: list[Firing] = []
        while True:
            stage = self._next_stage.get(actor, 0)
            batch = self._batch.get(actor, 0)
            start, stop = batch * self.size, (batch + 1) * self.size
            keys = self.stages[stage]
            if any(view.steps(actor, key) < stop for key in keys):
                return firings
            firings.append(
                {
                    "trigger": self.kind,
                    "actor": actor,
                    "stage": stage,
                    "last_stage": stage == len(self.stages) - 1,
                    "keys": list(keys),
                    "start": start,
                    "stop": stop,
                    "at": event.now,
                }
            )
            if stage + 1 == len(self.stages):
                self._next_stage[actor], self._batch[actor] = 0, batch + 1
            else:
                self._next_stage[actor] = stage + 1
