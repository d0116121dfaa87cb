"""The emulated engine's scheduler: continuous batching in real time (DESIGN.md "engine").

One asyncio decode loop serves every running request, as SGLang's scheduler does: each step
decodes one token for each running request and prefills a chunk of the admitted prompts. How long
a step takes is not a constant of this module: it is the simulator's engine model
(:class:`workers.sim.llm.cost.ContextCost` over
:class:`workers.sim.llm.latency.ContextLatencyModel`, heddle §2.2/§5.2) evaluated for the batch
and context of *this* step, then slept for in wall-clock time (``time_scale`` stretches or
shrinks it). So a router in front of several emulated engines meets the interference (α(b), the
per-token time rising with batch and context) that Heddle's planner models.

Scheduling: pending requests wait in :class:`workers.algorithms.heddle.priority.PriorityQueue`
(higher ``priority`` first, FIFO among equals — SGLang's ``--enable-priority-scheduling``
convention); with ``preemptive``, when the pending head does not fit (no free slot, or no KV
room for its context + ``admission_reserve_tokens`` per running request), running requests it
strictly outranks are preempted to admit it — all or nothing, lowest priority and latest admitted
first (:mod:`workers.algorithms.heddle.preemption`, the rule the simulator's worker follows); a
victim goes back to pending and re-prefills its context when it resumes.

Prefix cache: as SGLang's radix cache (on by default), the KV of a request that stops running —
finished, aborted or preempted — stays cached (:mod:`workers.engine.prefix_cache`), so a request
whose prompt starts with a cached sequence (a trajectory's next step, a resumed victim) prefills
only the rest; ``prefix_cache=False`` is SGLang's ``--disable-radix-cache``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from workers.algorithms.heddle.preemption import preemption_key, victims_to_admit
from workers.algorithms.heddle.priority import PriorityQueue, should_preempt
from workers.engine.openai_api import GenerationSpec, filler_text
from workers.engine.prefix_cache import DEFAULT_BLOCK_TOKENS, PrefixCache, block_chain
from workers.sim.llm.cost import ContextCost, EngineCost
from workers.sim.llm.latency import ContextLatencyModel
from workers.sim.llm.worker import ADMISSION_RESERVE_TOKENS

FINISH_LENGTH = "length"
FINISH_STOP = "stop"
FINISH_ABORT = "abort"


class EngineBusy(ValueError):
    """A request id that is already in flight (SGLang refuses duplicate ``rid`` too)."""


class PromptTooLong(ValueError):
    """A prompt the engine's memory could never hold (it would wait forever); ``field``: the
    request field to blame when the engine knows it (else the endpoint's prompt field)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(eq=False)
class EngineRequest:
    """One generation request inside the engine. ``generated`` only grows; ``finish_reason`` is
    set once, when it ends (length, stop or abort)."""

    rid: str
    prompt_tokens: int
    max_tokens: int
    priority: int
    stop_at_length_is_eos: bool
    arrival: float
    generated: int = 0
    prefill_left: int = 0
    finish_reason: str | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    admitted_seq: int = 0  # when it last joined the batch (the preemption order's tie-break)
    # The prompt as tokens (words of a text prompt, or token ids), for the prefix cache; empty:
    # not cacheable. While running: the chain it matched, the tokens it found cached, and the
    # prefill cost per token of the rest (the simulator's worker's rate, ``ContextCost``).
    tokens: tuple[Hashable, ...] = ()
    matched_chain: list[int] = field(default_factory=list, repr=False)
    cached_tokens: int = 0
    prefill_seconds_per_token: float = 0.0
    _waiter: asyncio.Future[None] | None = field(default=None, repr=False)

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    def _notify(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def progress(self, seen: int) -> int:
        """Wait until more than ``seen`` tokens exist or the request ended; return ``generated``."""
        while self.generated <= seen and self.finish_reason is None:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self.generated


@dataclass
class EngineStats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    preemptions: int = 0
    steps: int = 0
    busy_seconds: float = 0.0
    last_step_seconds: float = 0.0
    decode_token_seconds_sum: float = 0.0  # per-output-token time, summed over tokens
    prefill_tokens: int = 0  # tokens prefilled at admissions (what the prefix cache did not hold)
    cached_prompt_tokens: int = 0  # tokens found in the prefix cache at admissions


@dataclass(frozen=True)
class EngineConfig:
    """``max_batch``: SGLang's ``--max-running-requests``; ``mp``: tensor-parallel degree of the
    emulated worker; ``time_scale``: wall seconds per model second (tests run faster than real);
    ``default_length_median``: median of the seeded log-normal output length used when a
    request gives no ``max_tokens``."""

    max_batch: int = 256
    mp: int = 1
    preemptive: bool = True
    time_scale: float = 1.0
    seed: int = 0
    default_length_median: float = 256.0
    default_length_sigma: float = 1.0
    default_length_cap: int = 4096
    admission_reserve_tokens: int = ADMISSION_RESERVE_TOKENS
    prefix_cache: bool = True
    prefix_block_tokens: int = DEFAULT_BLOCK_TOKENS

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if self.prefix_block_tokens < 1:
            raise ValueError("prefix_block_tokens must be >= 1")
        if not self.time_scale > 0:
            raise ValueError("time_scale must be > 0")


class RequestBook:
    """What every engine keeps of its requests: by id, pending (by priority, higher first) and
    running, and how they end (counted in ``stats``, their waiters woken)."""

    def __init__(self) -> None:
        self._requests: dict[str, EngineRequest] = {}
        self._pending = PriorityQueue(highest_first=True)
        self._running: dict[str, EngineRequest] = {}
        self.stats = EngineStats()

    def abort(self, rid: str) -> bool:
        raise NotImplementedError

    def abort_all(self) -> int:
        rids = list(self._requests)
        for rid in rids:
            self.abort(rid)
        return len(rids)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_queued(self) -> int:
        return len(self._pending)

    def _end(self, request: EngineRequest, reason: str) -> None:
        request.finish_reason = reason
        request.finished_at = time.monotonic()
        self._requests.pop(request.rid, None)
        if reason == FINISH_ABORT:
            self.stats.requests_aborted += 1
        else:
            self.stats.requests_finished += 1
        request._notify()


class EmulatedEngine(RequestBook):
    """Continuous batching over the simulator's latency model, in real time (module docstring)."""

    def __init__(self, config: EngineConfig | None = None, cost: EngineCost | None = None) -> None:
        super().__init__()
        self.config = config or EngineConfig()
        self.cost: EngineCost = cost or ContextCost(ContextLatencyModel(), self.config.mp)
        self.kv_capacity = float(self.cost.kv_capacity_tokens)
        self._rng = random.Random(self.config.seed)
        self._running_order = PriorityQueue(highest_first=False)  # the lowest priority on top
        self._admissions = itertools.count(1)
        self.prefix_cache = (
            PrefixCache(self.config.prefix_block_tokens) if self.config.prefix_cache else None
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._decode_loop())

    async def stop(self) -> None:
        """Abort everything in flight and stop the loop."""
        self.abort_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ------------------------------------------------------------------ requests
    def draw_length(self) -> int:
        """An output length for a request without ``max_tokens`` (seeded log-normal)."""
        cfg = self.config
        value = self._rng.lognormvariate(
            math.log(cfg.default_length_median), cfg.default_length_sigma
        )
        return max(1, min(cfg.default_length_cap, round(value)))

    def submit(
        self,
        rid: str,
        *,
        prompt_tokens: int,
        max_tokens: int | None,
        priority: int = 0,
        tokens: Sequence[Hashable] = (),
    ) -> EngineRequest:
        """Queue a request; ``tokens``: its prompt as tokens, for the prefix cache (empty: the
        emulation knows only its length, and nothing of it is cached)."""
        if rid in self._requests:
            raise EngineBusy(f"request id {rid!r} is already running")
        if prompt_tokens + self.config.admission_reserve_tokens > self.kv_capacity:
            raise PromptTooLong(
                f"{prompt_tokens} prompt tokens do not fit the KV pool "
                f"({int(self.kv_capacity)} tokens)"
            )
        length = max_tokens if max_tokens is not None else self.draw_length()
        request = EngineRequest(
            rid=rid,
            prompt_tokens=max(0, prompt_tokens),
            max_tokens=length,
            priority=priority,
            stop_at_length_is_eos=max_tokens is None,
            arrival=time.monotonic(),
            tokens=tuple(tokens),
        )
        self._requests[rid] = request
        if length <= 0:
            self._end(request, FINISH_LENGTH)
            return request
        self._pending.push(rid, priority)
        self.stats.prompt_tokens += request.prompt_tokens
        self._wake.set()
        return request

    def submit_spec(self, rid: str, spec: GenerationSpec) -> EngineRequest:
        """``submit`` for an HTTP request: the prompt's length, and its tokens for the prefix
        cache (a text prompt's words, as ``count_tokens`` counts them, or its token ids)."""
        tokens = spec.prompt.split() if isinstance(spec.prompt, str) else spec.prompt
        return self.submit(
            rid, prompt_tokens=spec.prompt_tokens, max_tokens=spec.max_tokens,
            priority=spec.priority, tokens=tokens,
        )  # fmt: skip

    def text(self, request: EngineRequest, start: int, end: int) -> str:
        """Tokens ``start..end-1`` of ``request``'s answer: deterministic filler."""
        return filler_text(start, end)

    def abort(self, rid: str) -> bool:
        """End a pending or running request now (unknown ids are a no-op, as in SGLang)."""
        request = self._requests.get(rid)
        if request is None:
            return False
        self._pending.remove(rid)
        if self._running.pop(rid, None) is not None:
            self._running_order.remove(rid)
            self._leave_batch(request)
        self._end(request, FINISH_ABORT)
        return True

    # ------------------------------------------------------------------ metrics
    @property
    def kv_tokens(self) -> int:
        return sum(r.context_tokens - r.prefill_left for r in self._running.values())

    @property
    def token_usage(self) -> float:
        return self.kv_tokens / self.kv_capacity if self.kv_capacity else 0.0

    # ------------------------------------------------------------------ scheduling
    def _admits(self, request: EngineRequest, kv_used: float, running: int) -> bool:
        """Whether ``request`` joins a batch of ``running`` requests holding ``kv_used`` tokens:
        a free slot and KV room for its context plus the per-request reserve. Alone, a request
        always runs (as the simulator's worker: otherwise it would wait forever)."""
        if running == 0:
            return True
        reserve = self.config.admission_reserve_tokens * (running + 1)
        return (
            running < self.config.max_batch
            and kv_used + request.context_tokens + reserve <= self.kv_capacity
        )

    def _admit_one(self, rid: str, priority: float) -> None:
        """``rid`` joins the batch: it prefills what the prefix cache does not hold of its
        context (a resumed victim recomputes what was evicted since)."""
        request = self._requests[rid]
        cached = 0
        if self.prefix_cache is not None and request.tokens:
            request.matched_chain = block_chain(
                self._sequence(request), self.prefix_cache.block_tokens
            )
            # at least one token is computed, as in SGLang: it yields the next token's logits
            cached = self.prefix_cache.acquire(request.matched_chain, request.context_tokens - 1)
        request.cached_tokens = cached
        request.prefill_left = request.context_tokens - cached
        request.prefill_seconds_per_token = self.cost.prefill_seconds_per_token(
            request.prefill_left, cached
        )
        self.stats.cached_prompt_tokens += cached
        self.stats.prefill_tokens += request.prefill_left
        request.admitted_seq = next(self._admissions)
        self._running[rid] = request
        self._running_order.push(rid, priority)

    @staticmethod
    def _sequence(request: EngineRequest) -> tuple[Hashable, ...]:
        """Its tokens so far: the prompt's, then the answer's (the filler the emulation emits)."""
        if not request.generated:
            return request.tokens
        return request.tokens + tuple(filler_text(0, request.generated).split())

    def _leave_batch(self, request: EngineRequest) -> None:
        """``request`` stopped running (finished, aborted or preempted): its KV goes to the
        prefix cache, and the cache is trimmed to what the running requests leave free."""
        cache = self.prefix_cache
        if cache is None or not request.tokens:
            return
        sequence = block_chain(self._sequence(request), cache.block_tokens)
        cache.release(request.matched_chain, request.cached_tokens, sequence)
        request.matched_chain, request.cached_tokens = [], 0
        self._trim_cache()

    def _trim_cache(self) -> None:
        if self.prefix_cache is not None:
            committed = sum(r.context_tokens for r in self._running.values())
            self.prefix_cache.trim(self.kv_capacity - committed)

    def _preempt(self, victim: EngineRequest) -> None:
        priority = self._running_order.priority_of(victim.rid)
        self._running_order.remove(victim.rid)
        del self._running[victim.rid]
        victim.preemptions += 1
        self.stats.preemptions += 1
        self._pending.push(victim.rid, priority)
        self._leave_batch(victim)

    def _schedule(self) -> None:
        """Fill the batch from the pending queue, preempting where heddle Alg. 1 says so.

        KV is counted as admission reserves it: a running request's whole context, even the part
        still to be prefilled (SGLang allocates a request's prefill when it admits it)."""
        self._fill()
        self._trim_cache()  # the cache gives way to what was admitted and to decode growth

    def _fill(self) -> None:
        kv_used = float(sum(r.context_tokens for r in self._running.values()))
        while self._pending:
            rid, priority = self._pending.peek()
            request = self._requests[str(rid)]
            running = len(self._running)
            if self._admits(request, kv_used, running):
                self._pending.pop()
                self._admit_one(str(rid), priority)
                kv_used += request.context_tokens
                continue
            if not self.config.preemptive:
                return
            victims = self._victims_for(request, priority, kv_used)
            if not victims:
                return
            for victim in victims:
                kv_used -= victim.context_tokens
                self._preempt(victim)

    def _victims_for(
        self, request: EngineRequest, priority: float, kv_used: float
    ) -> list[EngineRequest]:
        """The running requests to preempt so the pending ``request`` is admitted (heddle
        Alg. 1, all or nothing: :func:`workers.algorithms.heddle.preemption.victims_to_admit`)."""
        running_priority = self._running_order.priority_of
        _, lowest = self._running_order.peek()
        if not should_preempt(
            top_pending_priority=priority, lowest_running_priority=lowest, batch_full=True
        ):
            return []  # it outranks nobody: no need to order the batch
        order = sorted(
            self._running.values(),
            key=lambda r: preemption_key(running_priority(r.rid), r.admitted_seq),
        )
        running = len(order)
        count = victims_to_admit(
            priority,
            ((running_priority(v.rid), float(v.context_tokens)) for v in order),
            lambda freed, victims: self._admits(request, kv_used - freed, running - victims),
        )
        return order[:count]

    def _step_seconds(self) -> tuple[float, list[tuple[EngineRequest, int]], int]:
        """Model seconds of the next step, the prefill chunk per request and the decode count."""
        chunk = self.cost.chunk_tokens or 1 << 30
        prefills: list[tuple[EngineRequest, int]] = []
        decode = 0
        kv = 0.0
        for request in self._running.values():
            if request.prefill_left > 0:
                if chunk > 0:
                    take = min(chunk, request.prefill_left)
                    chunk -= take
                    prefills.append((request, take))
            else:
                decode += 1
                kv += request.context_tokens
        prefill_tokens = sum(take for _, take in prefills)
        seconds = self.cost.base_step_seconds(decode, prefill_tokens) + kv * (
            self.cost.kv_seconds_per_token
        )
        # each request's chunk at its own rate: its prefill after its cached prefix (the
        # simulator's worker charges the same)
        seconds += sum(take * request.prefill_seconds_per_token for request, take in prefills)
        return seconds, prefills, decode

    async def _decode_loop(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            self._schedule()
            if not self._running:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                continue
            seconds, prefills, decode = self._step_seconds()
            wall = seconds * self.config.time_scale
            # Absolute deadlines: the loop's own work does not add up across steps.
            deadline = max(deadline + wall, loop.time())
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self._advance(prefills, seconds, decode)

    def _advance(
        self, prefills: list[tuple[EngineRequest, int]], seconds: float, decode: int
    ) -> None:
        """Apply one finished step: prefill chunks progress, every decoding request gains a
        token. Requests aborted during the sleep are no longer in ``_running`` and are skipped."""
        stats = self.stats
        stats.steps += 1
        stats.busy_seconds += seconds
        stats.last_step_seconds = seconds
        prefilled = set()
        for request, take in prefills:
            if request.rid in self._running:
                request.prefill_left -= take
                prefilled.add(request.rid)
        now = time.monotonic()
        finished = []
        for request in self._running.values():
            if request.prefill_left > 0 or request.rid in prefilled:
                continue
            request.generated += 1
            if request.first_token_at is None:
                request.first_token_at = now
            if request.generated >= request.max_tokens:
                finished.append(request)
            else:
                request._notify()
        if decode:
            stats.generation_tokens += decode
            stats.decode_token_seconds_sum += seconds * decode
        for request in finished:
            del self._running[request.rid]
            self._running_order.remove(request.rid)
            self._leave_batch(request)
            reason = FINISH_STOP if request.stop_at_length_is_eos else FINISH_LENGTH
            self._end(request, reason)
