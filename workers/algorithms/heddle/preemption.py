"""Which running requests to preempt so that a pending one is admitted (heddle §4.2, Alg. 1).

One rule for every engine Loom models or runs — the simulator's worker
(``workers.sim.llm.worker``) and the emulated engine (``workers.engine.core``):

- **Order.** Victims are taken lowest priority first, and among equal priorities the latest
  admitted first: the request with the least progress to lose, as vLLM's and SGLang's
  retraction choose (:func:`preemption_key`).
- **Outranking.** Every victim must be strictly outranked by the pending request (Alg. 1's
  test, :func:`workers.algorithms.heddle.priority.should_preempt`), so equal priorities never
  thrash.
- **All or nothing.** Victims are taken only until together they admit the pending request (a
  free slot, and the KV they hold); if every outranked victim together would not, nobody is
  preempted: a partial preemption would only throw away the victims' progress and slots while
  the pending request still waits (as SGLang's ``preempt_to_schedule`` checks the room it would
  free before retracting anything).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from workers.algorithms.heddle.priority import should_preempt

__all__ = ["Admits", "preemption_key", "victims_to_admit"]

# ``admits(freed_kv_tokens, victims)``: would the pending request be admitted once ``victims``
# running requests holding ``freed_kv_tokens`` of KV between them are preempted?
Admits = Callable[[float, int], bool]


def preemption_key(priority: float, admitted_seq: int) -> tuple[float, int]:
    """Sort key of a running request in preemption order: the first one sorted is the first
    preempted (lowest priority; latest admitted among equals)."""
    return (priority, -admitted_seq)


def victims_to_admit(
    pending_priority: float, candidates: Iterable[tuple[float, float]], admits: Admits
) -> int:
    """How many of ``candidates`` — ``(priority, kv tokens held)`` of the running requests, in
    preemption order — to preempt so the pending request is admitted; 0 when no prefix of
    strictly outranked candidates would admit it (module docstring). ``candidates`` is read
    lazily, only as far as the answer needs."""
    freed = 0.0
    for count, (priority, held) in enumerate(candidates, start=1):
        if not should_preempt(
            top_pending_priority=pending_priority,
            lowest_running_priority=priority,
            batch_full=True,
        ):
            return 0
        freed += held
        if admits(freed, count):
            return count
    return 0
