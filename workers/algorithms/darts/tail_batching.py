"""Tail Batching's round planning (RollPacker, Gao et al. 2026), as darts App. H describes it.

Each short round draws ``N' = ratio·N`` fresh prompts (``M`` samples each) and ends once ``N``
groups are complete: ``T_batch = T_group,(N)``. The unfinished prompts' samples are aborted and
the prompts are deferred to a dedicated queue; whenever ``N`` have gathered they are re-computed
from scratch in one long round (all ``M`` samples, no over-provisioning, run to the end). Once
the fresh stream runs out, the rest of the queue is flushed in rounds of at most ``N``. Every
round is one training step of the groups it completed.

RollPacker's own short rounds also over-provision responses ("speculative execution": ``η·P_0``
prompts of ``η·R_0`` responses each, a prompt complete at its first ``R_0`` finished responses,
the rest aborted; its released configuration sets ``max_prompts_ratio`` 1.25 and
``max_num_return_sequences`` 5 of ``num_return_sequences`` 4). ``response_ratio`` > 1 is that
form; 1 is App. H's prompt-level form. Long rounds never over-provision.

Pure: the caller runs each round (a simulator or a real generator) and reports which prompts
completed; this class only says what to run next. The simulator (``workers.sim.darts``) and the
GRPO lab (``bench.darts_lab``) both drive it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

PromptT = TypeVar("PromptT")


@dataclass(frozen=True)
class TailBatchingRound(Generic[PromptT]):
    """One round: its prompts, whether it re-computes deferred ones, and its stop rules."""

    prompts: tuple[PromptT, ...]
    recompute: bool
    stop_after_groups: int | None  # short rounds over more than N prompts end at N complete
    # Candidates per prompt: above ``M`` a group completes at its first ``M`` finished samples.
    samples_per_prompt: int | None = None


class TailBatchingPlanner(Generic[PromptT]):
    """The deferral queue and the choice of the next round."""

    def __init__(
        self,
        prompts_per_step: int,
        ratio: float,
        *,
        group_size: int | None = None,
        response_ratio: float = 1.0,
    ) -> None:
        """``response_ratio`` > 1 needs ``group_size``: short rounds then draw
        ``round(response_ratio·M)`` samples per prompt (RollPacker's response over-provisioning);
        long rounds always draw ``M``."""
        if prompts_per_step < 1:
            raise ValueError("prompts_per_step must be at least 1")
        if ratio < 1.0 or response_ratio < 1.0:
            raise ValueError("Tail Batching over-provisions: ratios must be at least 1")
        if response_ratio > 1.0 and group_size is None:
            raise ValueError("response over-provisioning needs the group size")
        self.prompts_per_step = prompts_per_step
        self.wide = max(prompts_per_step, round(ratio * prompts_per_step))
        self.group_size = group_size
        self.short_samples = (
            None if group_size is None else max(group_size, round(response_ratio * group_size))
        )
        self._deferred: list[PromptT] = []

    @property
    def deferred(self) -> tuple[PromptT, ...]:
        return tuple(self._deferred)

    def next_round(self, fresh: deque[PromptT]) -> TailBatchingRound[PromptT] | None:
        """The next round, taking fresh prompts from the left of ``fresh``; ``None`` when done.

        A full queue of deferred prompts is re-computed before more fresh prompts are drawn.
        """
        n = self.prompts_per_step
        if len(self._deferred) >= n or (self._deferred and not fresh):
            prompts = tuple(self._deferred[:n])
            del self._deferred[:n]
            return TailBatchingRound(
                prompts=prompts,
                recompute=True,
                stop_after_groups=None,
                samples_per_prompt=self.group_size,
            )
        if not fresh:
            return None
        prompts = tuple(fresh.popleft() for _ in range(min(self.wide, len(fresh))))
        stop = n if len(prompts) > n else None
        return TailBatchingRound(
            prompts=prompts,
            recompute=False,
            stop_after_groups=stop,
            samples_per_prompt=self.short_samples,
        )

    def round_finished(
        self, finished: TailBatchingRound[PromptT], completed: Sequence[bool]
    ) -> None:
        """Defer the prompts a short round left incomplete (a long round runs to the end)."""
        if len(completed) != len(finished.prompts):
            raise ValueError("one completion flag per prompt of the round")
        if finished.recompute:
            return
        self._deferred.extend(
            p for p, done in zip(finished.prompts, completed, strict=True) if not done
        )
