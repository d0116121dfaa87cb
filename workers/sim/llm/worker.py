"""A simulated LLM worker: continuous batching, prefix cache, priorities and preemption.

It stands in for one SGLang server (one data-parallel replica of ``mp`` GPUs) on the virtual
clock of :class:`workers.sim.events.EventLoop` (DESIGN.md "The simulator").

Model (heddle §2.2–§5, the assumptions live in ``workers.algorithms.heddle.latency_model``):

- **Continuous batching**: up to ``max_batch`` requests decode together; all of them advance one
  token every ``per_token_seconds(b)`` where ``b`` is the current running count. The simulation is
  exact for that fluid model: it tracks a per-worker virtual token counter, so an event costs
  O(log n) and not O(batch).
- **Prefill** of the context tokens not found in the prefix cache stalls the whole batch for
  ``uncached · prefill_seconds_per_token`` (prefill competes with decode for compute).
- **Prefix cache**: per ``cache_key`` (a trajectory id) the number of context tokens whose KV is
  resident, LRU-evicted beyond ``cache_capacity_tokens``; a running request's entry is pinned.
- **Priorities**: pending requests are ordered by ``priority`` (higher first, FIFO among equals);
  with ``preemptive=True`` a pending request that outranks the lowest-priority running request
  preempts it (heddle Alg. 1). A preempted request keeps its KV, so it resumes without prefill.
- **Abort** removes a pending or running request and reports the tokens generated so far.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workers.algorithms.heddle.priority import PriorityQueue, should_preempt
from workers.sim.events import EventHandle, EventLoop

_EPS_TOKENS = 1e-6


@dataclass
class GenerationResult:
    """What a worker reports when a request leaves it (finished or aborted)."""

    request_id: str
    worker_id: int
    submitted_at: float
    first_scheduled_at: float | None
    finished_at: float
    queueing_seconds: float
    output_tokens: int
    prefill_tokens: int
    cached_tokens: int
    preemptions: int
    aborted: bool
    tag: Any = None


@dataclass
class GenerationRequest:
    """One generation call: decode ``output_tokens`` after ``context_tokens`` of context.

    ``cache_key`` names the prefix the context extends (a trajectory id; ``None`` = no reuse).
    ``on_done`` is called (on the event loop, at the finish time) with a :class:`GenerationResult`.
    ``tag`` is the caller's own data, handed back in the result.
    """

    request_id: str
    output_tokens: int
    context_tokens: int = 0
    cache_key: str | None = None
    priority: float = 0.0
    on_done: Callable[[GenerationResult], None] | None = None
    tag: Any = None


@dataclass
class _State:
    request: GenerationRequest
    submitted_at: float
    remaining_tokens: float
    pending_since: float
    queueing_seconds: float = 0.0
    first_scheduled_at: float | None = None
    finish_at_virtual: float = 0.0
    started_virtual: float = 0.0
    has_kv: bool = False
    prefill_tokens: int = 0
    cached_tokens: int = 0
    preemptions: int = 0
    running: bool = False


@dataclass
class WorkerStats:
    tokens_generated: float = 0.0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    preemptions: int = 0
    finished: int = 0
    aborted: int = 0
    busy_seconds: float = 0.0


class LLMWorker:
    """One simulated LLM server. See the module docstring for the model."""

    def __init__(
        self,
        loop: EventLoop,
        worker_id: int,
        *,
        per_token_seconds: Callable[[int], float],
        prefill_seconds_per_token: float = 1e-4,
        max_batch: int = 256,
        cache_capacity_tokens: float = float("inf"),
        preemptive: bool = False,
        mp: int = 1,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.loop = loop
        self.worker_id = worker_id
        self.mp = mp
        self.max_batch = max_batch
        self.preemptive = preemptive
        self._ptl = per_token_seconds
        self._prefill_s_per_token = prefill_seconds_per_token
        self._cache_capacity = cache_capacity_tokens
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._pinned: dict[str, int] = {}
        self._states: dict[str, _State] = {}
        self._pending = PriorityQueue(highest_first=True)
        self._running = PriorityQueue(highest_first=False)
        self._finish_heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._virtual = 0.0
        self._last_update = loop.now
        self._stall_until = loop.now
        self._completion: EventHandle | None = None
        self.stats = WorkerStats()

    # ---------------------------------------------------------------- public API
    @property
    def running_count(self) -> int:
        return len(self._running)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def load(self) -> int:
        """Requests in flight here (running + pending): the slime/SGLang-router load signal."""
        return len(self._states)

    def cached_tokens(self, cache_key: str) -> int:
        return self._cache.get(cache_key, 0)

    def insert_cache(self, cache_key: str, tokens: int) -> None:
        """Install a prefix (a migrated KV cache arriving from another worker)."""
        self._cache[cache_key] = max(tokens, self._cache.get(cache_key, 0))
        self._cache.move_to_end(cache_key)
        self._evict()

    def drop_cache(self, cache_key: str) -> None:
        if cache_key not in self._pinned:
            self._cache.pop(cache_key, None)

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

    def abort(self, request_id: str) -> bool:
        """Early stop: drop a pending or running request; ``on_done`` gets ``aborted=True``."""
        state = self._states.get(request_id)
        if state is None:
            return False
        self._advance()
        if request_id in self._pending:
            self._pending.remove(request_id)
            state.queueing_seconds += self.loop.now - state.pending_since
        else:
            self._running.remove(request_id)
            state.remaining_tokens = max(state.finish_at_virtual - self._virtual, 0.0)
        self._release(state, aborted=True)
        self._fill()
        self._reschedule()
        return True

    # ---------------------------------------------------------------- internals
    def _advance(self) -> None:
        now = self.loop.now
        decode_from = max(self._last_update, self._stall_until)
        if self._running and now > decode_from:
            dt = now - decode_from
            self._virtual += dt / self._ptl(len(self._running))
        if self._running and now > self._last_update:
            self.stats.busy_seconds += now - self._last_update
        self._last_update = now

    def _reschedule(self) -> None:
        if self._completion is not None:
            self._completion.cancel()
            self._completion = None
        while self._finish_heap and self._finish_heap[0][2] not in self._running:
            heapq.heappop(self._finish_heap)
        if not self._finish_heap:
            return
        finish_virtual = self._finish_heap[0][0]
        start = max(self.loop.now, self._stall_until)
        delay_tokens = max(finish_virtual - self._virtual, 0.0)
        when = start + delay_tokens * self._ptl(len(self._running))
        self._completion = self.loop.at(when, self._on_completion)

    def _on_completion(self) -> None:
        self._completion = None
        self._advance()
        while self._finish_heap:
            finish_virtual, _, request_id = self._finish_heap[0]
            if request_id not in self._running:
                heapq.heappop(self._finish_heap)
                continue
            if finish_virtual > self._virtual + _EPS_TOKENS:
                break
            heapq.heappop(self._finish_heap)
            self._running.remove(request_id)
            state = self._states[request_id]
            state.remaining_tokens = 0.0
            self._release(state, aborted=False)
        self._fill()
        self._reschedule()

    def _fill(self) -> None:
        while self._pending:
            request_id, priority = self._pending.peek()
            if len(self._running) < self.max_batch:
                self._pending.pop()
                self._admit(str(request_id))
                continue
            if not self.preemptive:
                return
            victim, lowest = self._running.peek()
            if not should_preempt(
                top_pending_priority=priority, lowest_running_priority=lowest, batch_full=True
            ):
                return
            self._preempt(str(victim))

    def _admit(self, request_id: str) -> None:
        state = self._states[request_id]
        now = self.loop.now
        state.queueing_seconds += now - state.pending_since
        if state.first_scheduled_at is None:
            state.first_scheduled_at = now
        request = state.request
        if not state.has_kv:
            cached = 0
            if request.cache_key is not None:
                cached = min(self._cache.get(request.cache_key, 0), request.context_tokens)
            uncached = request.context_tokens - cached
            state.prefill_tokens, state.cached_tokens = uncached, cached
            self.stats.prefill_tokens += uncached
            self.stats.cached_tokens += cached
            if uncached > 0:
                self._stall_until = max(now, self._stall_until) + (
                    uncached * self._prefill_s_per_token
                )
            state.has_kv = True
        if request.cache_key is not None:
            self._pinned[request.cache_key] = self._pinned.get(request.cache_key, 0) + 1
        state.started_virtual = self._virtual
        state.finish_at_virtual = self._virtual + state.remaining_tokens
        state.running = True
        self._running.push(request_id, request.priority)
        heapq.heappush(self._finish_heap, (state.finish_at_virtual, next(self._seq), request_id))

    def _preempt(self, request_id: str) -> None:
        state = self._states[request_id]
        self._running.remove(request_id)
        state.running = False
        state.remaining_tokens = max(state.finish_at_virtual - self._virtual, 0.0)
        state.preemptions += 1
        state.pending_since = self.loop.now
        self.stats.preemptions += 1
        self._unpin(state.request.cache_key)
        # the KV stays resident (heddle §4.2: preemption persists the prefix cache)
        self._pending.push(request_id, state.request.priority)

    def _unpin(self, cache_key: str | None) -> None:
        if cache_key is None:
            return
        count = self._pinned.get(cache_key, 0) - 1
        if count <= 0:
            self._pinned.pop(cache_key, None)
        else:
            self._pinned[cache_key] = count

    def _release(self, state: _State, *, aborted: bool) -> None:
        request = state.request
        del self._states[request.request_id]
        generated = float(request.output_tokens) - state.remaining_tokens
        if state.running:
            self._unpin(request.cache_key)
            state.running = False
        if request.cache_key is not None and state.has_kv:
            resident = request.context_tokens + round(generated)
            self._cache[request.cache_key] = max(resident, self._cache.get(request.cache_key, 0))
            self._cache.move_to_end(request.cache_key)
            self._evict()
        self.stats.tokens_generated += generated
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
            output_tokens=round(generated),
            prefill_tokens=state.prefill_tokens,
            cached_tokens=state.cached_tokens,
            preemptions=state.preemptions,
            aborted=aborted,
            tag=request.tag,
        )
        if request.on_done is not None:
            callback = request.on_done
            self.loop.after(0.0, lambda: callback(result))

    def _evict(self) -> None:
        total = sum(self._cache.values())
        if total <= self._cache_capacity:
            return
        for key in list(self._cache):
            if total <= self._cache_capacity:
                break
            if key in self._pinned:
                continue
            total -= self._cache.pop(key)


@dataclass
class WorkerPool:
    """A set of workers and a default router (least in-flight), for scenarios that do not care
    about placement (e.g. single-turn GRPO rollouts)."""

    workers: list[LLMWorker] = field(default_factory=list)

    def least_loaded(self) -> LLMWorker:
        return min(self.workers, key=lambda w: (w.load, w.worker_id))

    def submit(self, request: GenerationRequest, worker_id: int | None = None) -> LLMWorker:
        worker = self.least_loaded() if worker_id is None else self.workers[worker_id]
        worker.submit(request)
        return worker

    def abort(self, request_id: str) -> bool:
        """Fan the abort out to every worker (an unknown id is a no-op, as in SGLang)."""
        return any(worker.abort(request_id) for worker in self.workers)
