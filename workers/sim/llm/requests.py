"""What goes in and out of a simulated LLM worker, and the simplest router over several.

The worker itself is :class:`workers.sim.llm.worker.LLMWorker`; ``WorkerPool`` only needs its
``load``, ``submit`` and ``abort``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.sim.llm.worker import LLMWorker


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
