"""A buffer's data, its eviction, samplers and triggers (artos §4.2, Fig. 9).

One ``ExperienceBuffer`` holds, per data key, a cyclic array of ``capacity`` steps (numpy, in this
process, or views on shared memory handed in by ``shm``), a slot table saying which actor's which
step each slot holds, and a model-data block of versioned objects (parameters, noise scale). Every
write is a buffer change: the bound triggers are checked at once and their firings passed on.

Steps are numbered per actor (0, 1, 2, … as the actor wrote them) so triggers can name slices of
an actor's data; keys of one step may arrive separately (the dual-stage pipeline), and a step is
*complete*, hence sampleable, once every key arrived.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from workers.algorithms.artos import (
    BufferEvent,
    EventKind,
    EvictionPolicy,
    FifoPerActor,
    Firing,
    PrioritisedBatch,
    PrioritisedSampler,
    SamplerError,
    Trigger,
    eviction_policy,
    full_batch,
    n_step_returns,
    uniform,
)
from workers.buffers.passers import MessagePasser, TriggerWrapper
from workers.buffers.schema import LENGTH_SUFFIX, Schema, SchemaError

Arrays = dict[str, npt.NDArray[Any]]
N_STEP_PREFIX = "n_step."  # the n-step sampler's own arrays, beside the data keys


class DataLostError(LookupError):
    """Asked-for steps were overwritten or dropped by the eviction policy."""


class ExperienceBuffer:
    """Experience data plus model data, with eviction, samplers and triggers (thread-safe)."""

    def __init__(
        self,
        name: str,
        schema: Schema,
        capacity: int,
        eviction: str = "fifo",
        prioritised: bool = False,
        seed: int = 0,
        storage: Mapping[str, npt.NDArray[Any]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.schema = name, schema
        self.policy: EvictionPolicy = eviction_policy(eviction, capacity, name)
        self.capacity = capacity
        self.rng = np.random.default_rng(seed)
        self.clock = clock
        fields = schema.stored_fields()
        if storage is None:
            storage = {
                k: np.zeros((capacity, *shape), dtype) for k, (shape, dtype) in fields.items()
            }
        for key, (shape, dtype) in fields.items():
            array = storage.get(key)
            if array is None or array.shape != (capacity, *shape) or array.dtype != dtype:
                raise SchemaError(f"{key}: storage does not match the schema and capacity")
        self.data: Mapping[str, npt.NDArray[Any]] = storage
        self._slot_actor = np.full(capacity, -1, dtype=np.int64)
        self._slot_step = np.full(capacity, -1, dtype=np.int64)
        self._slot_keys = np.zeros(capacity, dtype=np.int64)
        self._actor_ids: dict[str, int] = {}
        self._actor_names: list[str] = []
        self._complete_steps: dict[str, int] = {}  # per actor: steps complete and queued FIFO
        self.fifo = FifoPerActor(limit=capacity)
        self._actor_slots: dict[str, list[int]] = {}
        self._steps: dict[tuple[str, str], int] = {}
        self._objects: dict[str, tuple[int, Any]] = {}
        self._triggers: list[TriggerWrapper] = []
        self.per = PrioritisedSampler(capacity) if prioritised else None
        self._lock = threading.RLock()
        self._complete_cache: tuple[int, npt.NDArray[np.int64]] | None = None
        self._changes = 0  # writes and releases so far: the complete slots' cache key
        self.stats = {"steps_written": 0, "steps_dropped": 0, "steps_evicted": 0, "samples": 0}

    # -- the BufferView protocol the triggers read ------------------------------------------
    def steps(self, actor: str, key: str) -> int:
        return self._steps.get((actor, key), 0)

    def actors(self) -> list[str]:
        return list(self._actor_slots)

    def object_version(self, key: str) -> int:
        return self._objects.get(key, (0, None))[0]

    # -- triggers -----------------------------------------------------------------------------
    def bind(self, trigger_id: str, trigger: Trigger, passer: MessagePasser) -> TriggerWrapper:
        """Bind a trigger: it is checked on every change of this buffer from now on."""
        wrapper = TriggerWrapper(trigger_id, trigger, passer)
        with self._lock:
            self._triggers.append(wrapper)
        return wrapper

    def _changed(self, event: BufferEvent) -> list[Firing]:
        firings: list[Firing] = []
        for wrapper in list(self._triggers):
            firings += wrapper.check(self, event)
        return firings

    def tick(self, now: float | None = None) -> list[Firing]:
        """The clock moved (time triggers); the shell calls this on a period."""
        with self._lock:
            return self._changed(BufferEvent(EventKind.TICK, self._now(now)))

    def _now(self, now: float | None) -> float:
        return self.clock() if now is None else now

    # -- writes -------------------------------------------------------------------------------
    def put(self, actor: str, batch: Mapping[str, Any], now: float | None = None) -> list[Firing]:
        """Append steps of some keys for ``actor``; returns the firings this change caused."""
        count, arrays = self.schema.validate(batch)
        return self.put_validated(actor, count, arrays, now)

    def put_validated(
        self, actor: str, count: int, arrays: Arrays, now: float | None = None
    ) -> list[Firing]:
        keys = [k for k in arrays if not k.endswith(LENGTH_SUFFIX)]
        with self._lock:
            actor_id = self._actor_id(actor)
            slots = self._actor_slots.setdefault(actor, [])
            start = {key: self.steps(actor, key) for key in keys}
            if len(set(start.values())) != 1:
                raise SchemaError(
                    f"{keys[0]}: keys of one write must be at the same step for {actor} "
                    f"(at {start})"
                )
            first = next(iter(start.values()))
            while len(slots) < first + count:
                slots.append(self._place(actor_id, len(slots)))
            target = np.asarray(slots[first : first + count], dtype=np.int64)
            kept = target >= 0
            kept &= self._slot_actor[np.maximum(target, 0)] == actor_id
            kept &= self._slot_step[np.maximum(target, 0)] == np.arange(first, first + count)
            for key, array in arrays.items():
                self.data[key][target[kept]] = array[kept]
            self._slot_keys[target[kept]] += len(keys)
            self._changes += 1
            if self.per is not None:
                for slot in target[kept][self._slot_keys[target[kept]] >= len(self.schema.keys)]:
                    self.per.add(int(slot))
            for key in keys:
                self._steps[(actor, key)] = first + count
            self._queue_complete(actor)
            now_value = self._now(now)
            firings: list[Firing] = []
            for key in keys:
                event = BufferEvent(EventKind.DATA, now_value, actor=actor, key=key)
                firings += self._changed(event)
            return firings

    def _actor_id(self, actor: str) -> int:
        if actor not in self._actor_ids:
            self._actor_ids[actor] = len(self._actor_names)
            self._actor_names.append(actor)
        return self._actor_ids[actor]

    def _queue_complete(self, actor: str) -> None:
        """Steps that just became complete join the FIFO-per-actor line as one block."""
        done = min(self.steps(actor, key) for key in self.schema.keys)
        before = self._complete_steps.get(actor, 0)
        if done > before:
            self.fifo.push(actor, before, done)
            self._complete_steps[actor] = done

    def _place(self, actor_id: int, step: int) -> int:
        self._changes += 1
        slot = self.policy.place(self.rng)
        self.stats["steps_written"] += 1
        if slot is None:
            self.stats["steps_dropped"] += 1
            return -1
        if self._slot_actor[slot] >= 0:
            self.stats["steps_evicted"] += 1
        self._slot_actor[slot], self._slot_step[slot] = actor_id, step
        self._slot_keys[slot] = 0
        if self.per is not None:
            self.per.remove(slot)
        return slot

    def put_object(self, key: str, value: Any, now: float | None = None) -> list[Firing]:
        """Write a model-data object (a new version); fires ``ObjectKeyTrigger`` s."""
        if not isinstance(key, str) or not key:
            raise SchemaError(f"key: expected a non-empty object key, got {key!r}")
        with self._lock:
            version = self.object_version(key) + 1
            self._objects[key] = (version, value)
            return self._changed(BufferEvent(EventKind.OBJECT, self._now(now), key=key))

    def get_object(self, key: str) -> tuple[int, Any]:
        """``(version, value)`` of a model-data object; ``KeyError`` naming it if never written."""
        with self._lock:
            if key not in self._objects:
                raise KeyError(f"{key}: no such object in buffer {self.name}")
            return self._objects[key]

    def drop_actor(
        self, actor: str, since_step: int | None = None, now: float | None = None
    ) -> int:
        """An actor died mid-sample: discard its partial data, per policy.

        ``since_step=None`` keeps its complete steps and drops only steps some key is missing
        for. ``since_step=k`` discards everything from its step ``k`` on (the whole interrupted
        sampling run) and resets the triggers' view of it, so the restarted actor's steps are
        the ones a ``DataKeyTrigger`` counts. Returns the number of steps dropped.
        """
        with self._lock:
            slots = self._actor_slots.get(actor, [])
            keys = self.schema.keys
            done = min((self.steps(actor, key) for key in keys), default=0)
            cut = done if since_step is None else since_step
            if not 0 <= cut <= done:
                raise SchemaError(f"since_step: {since_step} outside 0..{done} for {actor}")
            actor_id = self._actor_ids.get(actor, -1)
            dropped = [
                slot
                for step, slot in enumerate(slots[cut:], start=cut)
                if slot >= 0
                and self._slot_actor[slot] == actor_id
                and self._slot_step[slot] == step
            ]
            self._release(dropped)
            del slots[cut:]
            for key in keys:
                self._steps[(actor, key)] = cut
            self.fifo.discard_actor(actor, cut)
            self._complete_steps[actor] = min(self._complete_steps.get(actor, 0), cut)
            if since_step is not None:
                self._changed(BufferEvent(EventKind.RESET, self._now(now), actor=actor))
            return len(dropped)

    def _release(self, slots: list[int]) -> None:
        if not slots:
            return
        self._changes += 1
        self.policy.release(slots)
        self._slot_actor[slots] = -1
        self._slot_step[slots] = -1
        self._slot_keys[slots] = 0
        if self.per is not None:
            for slot in slots:
                self.per.remove(slot)

    # -- reads --------------------------------------------------------------------------------
    def _complete(self) -> npt.NDArray[np.int64]:
        """Slots whose step is complete, oldest write first (read-only: cached until the next
        write or release, so an off-policy learner's many samples between two writes do not
        each sort the table)."""
        cached = self._complete_cache
        if cached is not None and cached[0] == self._changes:
            return cached[1]
        occupied = self.policy.occupied()
        complete = occupied[self._slot_keys[occupied] >= len(self.schema.keys)]
        complete.setflags(write=False)
        self._complete_cache = (self._changes, complete)
        return complete

    def read(
        self, slots: Iterable[int] | npt.NDArray[np.int64], keys: Iterable[str] = ()
    ) -> Arrays:
        index = np.asarray(list(slots) if not isinstance(slots, np.ndarray) else slots)
        names = list(keys) or list(self.data)
        return {key: self.data[key][index].copy() for key in names}

    def gather(
        self,
        slices: Mapping[str, tuple[int, int]],
        keys: Iterable[str] = (),
        consume: bool = False,
    ) -> Arrays:
        """The steps ``[start, stop)`` of each named actor, concatenated in the order given;
        ``consume`` marks them sampled (an on-policy learner's full batch, in actor order)."""
        with self._lock:
            index = []
            for actor, (start, stop) in slices.items():
                slots = self._actor_slots.get(actor, [])
                actor_id = self._actor_ids.get(actor, -1)
                chosen = np.asarray(slots[start:stop], dtype=np.int64)
                expected = np.arange(start, stop)
                if (
                    chosen.shape != expected.shape
                    or np.any(chosen < 0)
                    or np.any(self._slot_actor[chosen] != actor_id)
                    or np.any(self._slot_step[chosen] != expected)
                ):
                    raise DataLostError(f"{actor}: steps {start}..{stop} are no longer held")
                index.append(chosen)
            slots_all = np.concatenate(index) if index else np.zeros(0, np.int64)
            if consume:
                self.policy.mark_sampled(slots_all)
                self.stats["samples"] += len(slots_all)
            return self.read(slots_all, keys)

    def mark_sampled(self, slots: Iterable[int] | npt.NDArray[np.int64]) -> None:
        with self._lock:
            self.policy.mark_sampled(np.asarray(list(slots), dtype=np.int64))

    def sample_full_batch(self, keys: Iterable[str] = ()) -> tuple[npt.NDArray[np.int64], Arrays]:
        """Every complete step, oldest first; they become sampled (on-policy slots reusable)."""
        with self._lock:
            slots = full_batch(self._complete())
            self.policy.mark_sampled(slots)
            self.stats["samples"] += len(slots)
            return slots, self.read(slots, keys)

    def sample_uniform(
        self, batch_size: int, keys: Iterable[str] = ()
    ) -> tuple[npt.NDArray[np.int64], Arrays]:
        with self._lock:
            complete = self._complete()
            slots = complete[uniform(len(complete), batch_size, self.rng)]
            self.policy.mark_sampled(slots)
            self.stats["samples"] += batch_size
            return slots, self.read(slots, keys)

    def sample_prioritised(
        self, batch_size: int, keys: Iterable[str] = ()
    ) -> tuple[PrioritisedBatch, Arrays]:
        if self.per is None:
            raise SchemaError(f"sampler: buffer {self.name} was not created prioritised")
        with self._lock:
            batch = self.per.sample(batch_size, self.rng)
            self.policy.mark_sampled(batch.indices)
            self.stats["samples"] += batch_size
            return batch, self.read(batch.indices, keys)

    def update_priorities(self, slots: npt.NDArray[np.int64], td_errors: Any) -> None:
        if self.per is None:
            raise SchemaError(f"sampler: buffer {self.name} was not created prioritised")
        with self._lock:
            self.per.update(slots, td_errors)

    def _held(
        self, actor_id: int, first: int, slots: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """Which of an actor's steps ``first, first + 1, …`` (at ``slots``) are still held and
        complete: not dropped, not overwritten by another step."""
        safe = np.maximum(slots, 0)
        return (
            (slots >= 0)
            & (self._slot_actor[safe] == actor_id)
            & (self._slot_step[safe] == np.arange(first, first + len(slots)))
            & (self._slot_keys[safe] >= len(self.schema.keys))
        )

    def sample_fifo(
        self, max_steps: int | None = None, actor: str | None = None, keys: Iterable[str] = ()
    ) -> tuple[str, npt.NDArray[np.int64], npt.NDArray[np.int64], Arrays]:
        """The oldest waiting block of complete steps (of ``actor`` when given), at most
        ``max_steps``: ``(actor, steps, slots, data)``, the steps in the order the actor wrote
        them, each taken once (artos Table 1's FIFO per actor). Steps the eviction policy
        overwrote before they were taken are skipped."""
        with self._lock:
            while True:
                name, start, stop = self.fifo.take(max_steps, actor)
                slots = np.asarray(self._actor_slots[name][start:stop], dtype=np.int64)
                held = self._held(self._actor_ids[name], start, slots)
                if held.any():
                    break
            slots, steps = slots[held], np.arange(start, stop, dtype=np.int64)[held]
            self.policy.mark_sampled(slots)
            self.stats["samples"] += len(slots)
            return name, steps, slots, self.read(slots, keys)

    def _scalar_key(self, field: str, key: Any, kinds: str) -> None:
        spec = self.schema.fields.get(key) if isinstance(key, str) else None
        if spec is None:
            raise SamplerError(f"{field}: {key!r} is not a key of buffer {self.name}")
        if spec.is_tokens or spec.stored_shape not in ((), (1,)):
            raise SamplerError(f"{field}: {key!r} must hold one number per step")
        if np.dtype(spec.dtype).kind not in kinds:
            raise SamplerError(f"{field}: {key!r} is {spec.dtype}, not a number")

    def check_n_step(
        self, n: Any, gamma: Any, reward_key: Any, done_key: Any, last_keys: Iterable[Any] = ()
    ) -> None:
        """The n-step sampler's parameters, each refusal naming its field."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SamplerError(f"n: expected a positive integer, got {n!r}")
        if not isinstance(gamma, int | float) or isinstance(gamma, bool) or not 0 <= gamma <= 1:
            raise SamplerError(f"gamma: expected a number in 0..1, got {gamma!r}")
        self._scalar_key("reward_key", reward_key, "iuf")
        self._scalar_key("done_key", done_key, "biu")
        for index, key in enumerate(last_keys):
            if key not in self.data:
                raise SamplerError(f"last_keys[{index}]: {key!r} is not a key of {self.name}")

    def sample_n_step(
        self,
        batch_size: int,
        n: int,
        gamma: float,
        reward_key: str,
        done_key: str,
        keys: Iterable[str] = (),
        last_keys: Iterable[str] = (),
    ) -> tuple[npt.NDArray[np.int64], Arrays]:
        """Uniform steps with their n-step returns (artos Table 1, the N-step pattern).

        For step t the return sums ``gamma^k · reward`` over the actor's next m ≤ n held steps,
        cut at a done; ``n_step.discounts`` is ``gamma^m`` (0 after a done), ``n_step.steps``
        is m and ``n_step.last_slots`` the slot of step t + m − 1, whose ``last_keys`` come
        back as ``n_step.last.<key>`` (with a ``next_obs`` key: the state to bootstrap from).
        """
        last_keys = list(last_keys)
        self.check_n_step(n, gamma, reward_key, done_key, last_keys)
        with self._lock:
            complete = self._complete()
            slots = complete[uniform(len(complete), batch_size, self.rng)]
            returns, discounts = np.zeros(batch_size), np.zeros(batch_size)
            steps, last = np.zeros(batch_size, np.int64), np.zeros(batch_size, np.int64)
            for row, slot in enumerate(slots.tolist()):
                actor_id, first = int(self._slot_actor[slot]), int(self._slot_step[slot])
                run = self._actor_slots[self._actor_names[actor_id]][first : first + n]
                window = np.asarray(run, dtype=np.int64)
                held = self._held(actor_id, first, window)
                window = window[: len(window) if held.all() else int(np.argmin(held))]
                result = n_step_returns(
                    self.data[reward_key][window].reshape(-1),
                    self.data[done_key][window].reshape(-1).astype(bool),
                    gamma,
                    n,
                )
                returns[row], discounts[row] = result.returns[0], result.discount[0]
                steps[row] = result.bootstrap_index[0]
                last[row] = window[steps[row] - 1]
            self.policy.mark_sampled(slots)
            self.stats["samples"] += batch_size
            extra = {"returns": returns, "discounts": discounts, "steps": steps}
            extra |= {"last_slots": last}
            extra |= {f"last.{key}": self.data[key][last].copy() for key in last_keys}
            data = self.read(slots, keys)
            return slots, {**data, **{N_STEP_PREFIX + k: v for k, v in extra.items()}}

    def snapshot(self) -> dict[str, Any]:
        """Fill level and counters, for stats endpoints and the dashboard."""
        with self._lock:
            return {
                "name": self.name,
                "capacity": self.capacity,
                "held": len(self.policy.occupied()),
                "complete": len(self._complete()),
                "actors": len(self._actor_slots),
                "objects": {k: v[0] for k, v in self._objects.items()},
                "firings": {w.trigger_id: w.firings for w in self._triggers},
                "fifo_waiting": self.fifo.waiting,
                **self.stats,
            }
