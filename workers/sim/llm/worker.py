"""A simulated LLM worker: continuous batching, prefix cache, KV memory, priorities, preemption.

It stands in for one SGLang server (one data-parallel replica of ``mp`` GPUs) on the virtual
clock of :class:`workers.sim.events.EventLoop` (DESIGN.md "The simulator"). What a step costs
comes from a :mod:`workers.sim.llm.cost` model:

- **Continuous batching**: up to ``max_batch`` requests run; every decoding request advances one
  token per step. A step takes ``base(B, chunk) + kv_seconds_per_token · K``, ``K`` the running
  batch's context; ``K`` grows by ``B`` tokens per step, so between two events the step time is
  linear in the step count and the simulation integrates it exactly (a per-worker virtual step
  counter; an event costs O(log n), not O(batch)). The legacy model has no ``K`` term.
- **Prefill** of the context not in the prefix cache: chunked (``chunk_tokens`` per step, its
  FLOPs added to the steps it shares with the decoding batch, the request decodes once its prefill
  is done), or — legacy — a stall of the whole batch.
- **KV memory** (context model): admission needs room for the request's context plus
  ``admission_reserve_tokens`` per running request, cached prefixes counting as room; only an
  admitted request evicts them (least recently used first), one turned away evicts nothing
  (SGLang's admission). When the running batch's KV fills the pool the lowest-priority running
  request is retracted (its KV drops to the evictable cache, as SGLang's retract does) and
  re-queued.
- **Priorities**: pending requests are ordered by ``priority`` (higher first, FIFO among equals);
  with ``preemptive=True`` a pending request that outranks the lowest-priority running request
  preempts it (heddle Alg. 1), its prefix cache persisting (§4.2). Short of a slot, one victim;
  short of KV, the outranked running requests, lowest first, that together make room, or none
  (SGLang's ``preempt_to_schedule``).
- **Reprioritize** re-keys a pending or running request (a refreshed prediction), with the same
  preemption test.
- **Abort** removes a pending or running request and reports the tokens generated so far.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from workers.algorithms.heddle.preemption import Admits, preemption_key, victims_to_admit
from workers.algorithms.heddle.priority import PriorityQueue
from workers.sim.events import EventHandle, EventLoop
from workers.sim.llm.cost import EngineCost, LegacyCost
from workers.sim.llm.kv import KVPool
from workers.sim.llm.requests import GenerationRequest, GenerationResult, WorkerPool

__all__ = ["GenerationRequest", "GenerationResult", "LLMWorker", "WorkerPool", "WorkerStats"]

_EPS = 1e-6
# KV kept free per running request at admission, for its decode growth. SGLang reserves
# new_token_ratio × min(max_new_tokens − generated, 4096) per running request, the ratio decaying
# from 0.7 to 0.7 × 0.14 (sglang environ: SGLANG_INIT_NEW_TOKEN_RATIO, _MIN_NEW_TOKEN_RATIO_FACTOR,
# SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION); we hold the decayed value, 0.098 × 4096.
ADMISSION_RESERVE_TOKENS = 401


@dataclass
class _State:
    request: GenerationRequest
    submitted_at: float
    remaining_tokens: float
    pending_since: float
    queueing_seconds: float = 0.0
    first_scheduled_at: float | None = None
    phase: str = "pending"  # pending | prefill | decode
    generated: float = 0.0  # tokens produced in earlier runs (before a preemption)
    finish_at_virtual: float = 0.0
    run: int = -1  # the finish-heap entry of this decode run (a preempted run's entry is stale)
    admitted: int = -1  # admission order: among equal priorities the latest is preempted first
    started_virtual: float = 0.0
    allocated: float = 0.0  # KV held at the start of this run (context model)
    prefill_remaining: float = 0.0
    prefill_cost: float = 0.0  # seconds per prefilled token
    has_kv: bool = False
    prefill_tokens: int = 0
    cached_tokens: int = 0
    preemptions: int = 0


@dataclass
class WorkerStats:
    tokens_generated: float = 0.0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    preemptions: int = 0
    kv_preemptions: int = 0
    finished: int = 0
    aborted: int = 0
    busy_seconds: float = 0.0


class LLMWorker:
    """One simulated LLM server. See the module docstring for the model.

    ``cost`` is the latency model; without it, ``per_token_seconds(b)`` and a flat
    ``prefill_seconds_per_token`` make the legacy one (what DARTS's scenarios pass)."""

    def __init__(
        self,
        loop: EventLoop,
        worker_id: int,
        *,
        per_token_seconds: Callable[[int], float] | None = None,
        prefill_seconds_per_token: float = 1e-4,
        max_batch: int = 256,
        cache_capacity_tokens: float = float("inf"),
        preemptive: bool = False,
        mp: int = 1,
        cost: EngineCost | None = None,
        admission_reserve_tokens: int = ADMISSION_RESERVE_TOKENS,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if cost is None:
            if per_token_seconds is None:
                raise ValueError("give a cost model or per_token_seconds")
            cost = LegacyCost(per_token_seconds, prefill_seconds_per_token)
        self.loop = loop
        self.worker_id = worker_id
        self.mp = mp
        self.max_batch = max_batch
        self.preemptive = preemptive
        self.cost = cost
        self._legacy = isinstance(cost, LegacyCost)
        self._chunk = cost.chunk_tokens
        self._reserve = admission_reserve_tokens
        self.kv = KVPool(
            cost.kv_capacity_tokens,
            cache_capacity_tokens=cache_capacity_tokens,
            pin_running=self._legacy,
        )
        self._states: dict[str, _State] = {}
        self._pending = PriorityQueue(highest_first=True)
        self._active = PriorityQueue(highest_first=False)  # prefilling + decoding
        self._decoding: set[str] = set()
        self._prefilling: deque[str] = deque()
        self._finish_heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._virtual = 0.0  # decode steps done
        self._kv_fixed = 0.0  # active KV = _kv_fixed + B · _virtual
        self._last_update = loop.now
        self._stall_until = loop.now
        self._completion: EventHandle | None = None
        self.stats = WorkerStats()

    # ---------------------------------------------------------------- public API
    @property
    def running_count(self) -> int:
        return len(self._active)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def load(self) -> int:
        """Requests in flight here (running + pending): the SGLang-router load signal."""
        return len(self._states)

    @property
    def active_kv_tokens(self) -> float:
        return self._kv_fixed + len(self._decoding) * self._virtual

    def cached_tokens(self, cache_key: str) -> int:
        return self.kv.cached(cache_key)

    def insert_cache(self, cache_key: str, tokens: int) -> bool:
        """Install a prefix (a migrated KV cache arriving); ``False`` if the KV pool is too full."""
        if not self._legacy:  # the pool's free room depends on the batch's KV now
            self._advance()
        return self.kv.insert(cache_key, tokens, self.active_kv_tokens)

    def drop_cache(self, cache_key: str) -> None:
        self.kv.drop(cache_key)

    def submit(self, request: GenerationRequest) -> None:
        if request.request_id in self._states:
            raise KeyError(f"request {request.request_id!r} already on worker {self.worker_id}")
        if request.output_tokens < 0 or request.context_tokens < 0:
            raise ValueError("token counts must be >= 0")
        self._advance()
        now = self.loop.now
        self._states[request.request_id] = _State(
            request=request,
            submitted_at=now,
            remaining_tokens=float(request.output_tokens),
            pending_since=now,
        )
        self._pending.push(request.request_id, request.priority)
        self._fill()
        self._reschedule()

    def reprioritize(self, request_id: str, priority: float) -> bool:
        """A refreshed prediction re-keys a request already here, pending or running (heddle
        §4.2: PPS "reorders the LLM inference requests in the pending queue" as predictions
        improve); a pending request that now outranks the lowest running one preempts it, and a
        running one that fell below a pending one is preempted. ``False`` if it is not here."""
        state = self._states.get(request_id)
        if state is None:
            return False
        if state.request.priority == priority:
            return True
        self._advance()
        state.request.priority = priority
        if request_id in self._pending:
            self._pending.update(request_id, priority)
        else:
            self._active.update(request_id, priority)
        self._fill()
        self._reschedule()
        return True

    def abort(self, request_id: str) -> bool:
        """Early stop: drop a pending or running request; ``on_done`` gets ``aborted=True``."""
        state = self._states.get(request_id)
        if state is None:
            return False
        self._advance()
        if request_id in self._pending:
            self._pending.remove(request_id)
            state.queueing_seconds += self.loop.now - state.pending_since
            held = 0.0
        else:
            held = self._stop_run(state)
        self._release(state, held, aborted=True)
        self._fill()
        self._reschedule()
        return True

    # ---------------------------------------------------------------- step timing
    def _step_now(self) -> tuple[float, float]:
        """(step time now, its growth per step) — the step time is linear in the step count."""
        decoding = len(self._decoding)
        prefill = self._chunk if self._prefilling and self._chunk else 0
        step = self.cost.base_step_seconds(decoding, prefill)
        if self._legacy:
            return step, 0.0
        if prefill:
            step += prefill * self._states[self._prefilling[0]].prefill_cost
        kv = self.cost.kv_seconds_per_token
        return step + kv * self.active_kv_tokens, kv * decoding

    def _busy(self) -> bool:
        return bool(self._decoding) or (bool(self._prefilling) and not self._legacy)

    def _advance(self) -> None:
        now = self.loop.now
        start = max(self._last_update, self._stall_until) if self._legacy else self._last_update
        if self._busy() and now > start:
            step, growth = self._step_now()
            elapsed = now - start
            if growth > 0:
                steps = 2.0 * elapsed / (step + math.sqrt(step * step + 2.0 * growth * elapsed))
            else:
                steps = elapsed / step
            self._virtual += steps
            if self._prefilling and self._chunk:
                self._states[self._prefilling[0]].prefill_remaining -= self._chunk * steps
        if self._busy() and now > self._last_update:
            self.stats.busy_seconds += now - self._last_update
        self._last_update = now

    def _reschedule(self) -> None:
        if self._completion is not None:
            self._completion.cancel()
            self._completion = None
        while self._finish_heap and not self._current(self._finish_heap[0]):
            heapq.heappop(self._finish_heap)
        targets = []
        if self._finish_heap:
            targets.append(self._finish_heap[0][0] - self._virtual)
        if self._prefilling and self._chunk:
            targets.append(self._states[self._prefilling[0]].prefill_remaining / self._chunk)
        if self._decoding and not self._legacy and len(self._active) > 1:
            targets.append((self.kv.capacity - self.active_kv_tokens) / len(self._decoding))
        if not targets:
            return
        steps = max(min(targets), 0.0)
        step, growth = self._step_now()
        start = max(self.loop.now, self._stall_until) if self._legacy else self.loop.now
        self._completion = self.loop.at(
            start + steps * step + growth * steps * steps / 2.0, self._on_step_event
        )

    def _on_step_event(self) -> None:
        self._completion = None
        self._advance()
        while self._finish_heap:
            finish_virtual, _, request_id = self._finish_heap[0]
            if not self._current(self._finish_heap[0]):
                heapq.heappop(self._finish_heap)
                continue
            if finish_virtual > self._virtual + _EPS:
                break
            heapq.heappop(self._finish_heap)
            state = self._states[request_id]
            held = self._stop_run(state)
            state.remaining_tokens = 0.0
            self._release(state, held, aborted=False)
        while self._prefilling and self._states[self._prefilling[0]].prefill_remaining <= _EPS:
            self._start_decode(self._states[self._prefilling.popleft()])
        if not self._legacy:
            self._relieve_memory()
        self._fill()
        self._reschedule()

    def _current(self, entry: tuple[float, int, str]) -> bool:
        """A finish entry is live while its request decodes in the run that pushed it."""
        request_id = entry[2]
        return request_id in self._decoding and self._states[request_id].run == entry[1]

    def _relieve_memory(self) -> None:
        """Retract running requests, lowest priority first, while the batch's KV overflows."""
        while len(self._active) > 1 and self.active_kv_tokens >= self.kv.capacity - _EPS:
            self.stats.kv_preemptions += 1
            self._preempt(self._preemption_order()[0])
        self.kv.trim(self.active_kv_tokens)

    # ---------------------------------------------------------------- admission
    def _context_of(self, state: _State) -> float:
        return state.request.context_tokens + state.generated

    def _needed(self, state: _State, running: int) -> float:
        """KV tokens ``state`` needs beyond its cached prefix to join ``running`` requests."""
        key = state.request.cache_key
        cached = self.kv.cached(key) if key is not None else 0
        return self._context_of(state) - cached + self._reserve * (running + 1)

    def _fits(self, state: _State) -> bool:
        if self._legacy or state.has_kv:
            return True
        key = state.request.cache_key or ""
        fits = self.kv.acquire(key, self.active_kv_tokens, self._needed(state, len(self._active)))
        return fits or not self._active  # alone on the worker, a request always runs

    def _fill(self) -> None:
        while self._pending:
            request_id, priority = self._pending.peek()
            state = self._states[str(request_id)]
            room = len(self._active) < self.max_batch
            if room and self._fits(state):
                self._pending.pop()
                self._admit(state)
                continue
            if not self.preemptive or not self._active:
                return
            victims = self._victims_for(state, priority)
            if not victims:
                return
            for victim in victims:
                self._preempt(victim)

    def _victims_for(self, state: _State, priority: float) -> list[_State]:
        """The running requests whose preemption admits ``state``: heddle Alg. 1, all or
        nothing (:func:`workers.algorithms.heddle.preemption.victims_to_admit`).

        Without a free slot one victim vacates it (§4.2: the high-priority request "is
        immediately promoted to the newly vacated slot"). Short of KV, as SGLang's
        ``preempt_to_schedule`` does, victims are taken until the KV they hold would admit the
        request."""
        order = self._preemption_order()
        admits: Admits
        if self._legacy or state.has_kv:  # only a slot is short

            def admits(freed: float, victims: int) -> bool:
                return True

        else:
            key = state.request.cache_key or ""
            active = self.active_kv_tokens
            running = len(self._active)

            def admits(freed: float, victims: int) -> bool:
                left = running - victims
                return left == 0 or self.kv.can_hold(key, active - freed, self._needed(state, left))

        candidates = ((v.request.priority, self._active_kv_of(v)) for v in order)
        return order[: victims_to_admit(priority, candidates, admits)]

    def _active_kv_of(self, state: _State) -> float:
        """The KV a running request holds in the pool now (what preempting it frees)."""
        if state.phase == "decode":
            return state.allocated + self._virtual - state.started_virtual
        return state.allocated

    def _preemption_order(self) -> list[_State]:
        """The running requests in the order they are preempted (lowest priority first, the
        latest admitted first among equals: :func:`~workers.algorithms.heddle.preemption.
        preemption_key`)."""
        running = (self._states[str(i)] for i in self._active)
        return sorted(running, key=lambda s: preemption_key(s.request.priority, s.admitted))

    def _admit(self, state: _State) -> None:
        now = self.loop.now
        state.admitted = next(self._seq)
        state.queueing_seconds += now - state.pending_since
        if state.first_scheduled_at is None:
            state.first_scheduled_at = now
        request = state.request
        self._active.push(request.request_id, request.priority)
        if self._legacy:
            resident = self.kv.admit(request.cache_key)
            if not state.has_kv:
                self._count_prefill(state, min(resident, request.context_tokens))
                uncached = request.context_tokens - state.cached_tokens
                if uncached > 0:
                    self._stall_until = max(now, self._stall_until) + (
                        uncached * self.cost.prefill_seconds_per_token(uncached, 0)
                    )
                state.has_kv = True
            self._start_decode(state)
            return
        context = self._context_of(state)
        cached = min(float(self.kv.admit(request.cache_key)), context)
        if not state.has_kv:
            self._count_prefill(state, int(cached), round(context - cached))
        state.allocated = context
        self._kv_fixed += context
        missing = context - cached
        if missing > _EPS and self._chunk:
            state.phase = "prefill"
            state.prefill_remaining = missing
            state.prefill_cost = self.cost.prefill_seconds_per_token(missing, cached)
            self._prefilling.append(request.request_id)
        else:
            self._start_decode(state)
        state.has_kv = True

    def _count_prefill(self, state: _State, cached: int, uncached: int | None = None) -> None:
        if uncached is None:
            uncached = state.request.context_tokens - cached
        if state.preemptions == 0 or state.cached_tokens + state.prefill_tokens == 0:
            state.cached_tokens = cached
            self.stats.cached_tokens += cached
        state.prefill_tokens += uncached
        self.stats.prefill_tokens += uncached

    def _start_decode(self, state: _State) -> None:
        state.phase = "decode"
        state.started_virtual = self._virtual
        state.finish_at_virtual = self._virtual + state.remaining_tokens
        self._kv_fixed -= self._virtual
        self._decoding.add(state.request.request_id)
        state.run = next(self._seq)
        heapq.heappush(
            self._finish_heap, (state.finish_at_virtual, state.run, state.request.request_id)
        )

    # ---------------------------------------------------------------- leaving a run
    def _stop_run(self, state: _State) -> float:
        """Take a prefilling or decoding request out of its run; returns the KV it held."""
        request_id = state.request.request_id
        self._active.remove(request_id)
        if state.phase == "decode":
            self._decoding.discard(request_id)
            left = max(state.finish_at_virtual - self._virtual, 0.0)
            produced = state.remaining_tokens - left
            state.remaining_tokens = left
            state.generated += produced
            self._kv_fixed -= state.allocated - state.started_virtual
            held = state.allocated + produced
        else:  # prefill
            self._prefilling.remove(request_id)
            self._kv_fixed -= state.allocated
            held = state.allocated - max(state.prefill_remaining, 0.0)
        state.phase = "pending"
        return held

    def _preempt(self, state: _State) -> None:
        request = state.request
        held = self._stop_run(state)
        state.preemptions += 1
        state.pending_since = self.loop.now
        self.stats.preemptions += 1
        if self._legacy:
            self.kv.unpin(request.cache_key)  # the KV stays resident
        else:
            # SGLang keeps a preempted request's prefix in the radix cache (heddle §4.2)
            self.kv.release(request.cache_key, int(held), self.active_kv_tokens)
            state.has_kv = False
        self._pending.push(request.request_id, request.priority)

    def _release(self, state: _State, held: float, *, aborted: bool) -> None:
        request = state.request
        del self._states[request.request_id]
        if request.cache_key is not None and state.has_kv:
            if self._legacy:
                held = request.context_tokens + round(state.generated)
            self.kv.release(request.cache_key, round(held), self.active_kv_tokens)
        self.stats.tokens_generated += state.generated
        if aborted:
            self.stats.aborted += 1
        else:
            self.stats.finished += 1
        result = GenerationResult(
            request_id=request.request_id,
            worker_id=self.worker_id,
            submitted_at=state.submitted_at,
            first_scheduled_at=state.first_scheduled_at,
            finished_at=self.loop.now,
            queueing_seconds=state.queueing_seconds,
            output_tokens=round(state.generated),
            prefill_tokens=state.prefill_tokens,
            cached_tokens=state.cached_tokens,
            preemptions=state.preemptions,
            aborted=aborted,
            tag=request.tag,
        )
        if request.on_done is not None:
            callback = request.on_done
            self.loop.after(0.0, lambda: callback(result))
