"""Distribution-aware trajectory sampling (darts §4.1.2, §4.3.1, App. D Alg. 2).

Two entry points share one selection rule:

- :func:`select_training_groups` picks the kept samples of a whole batch at once (vectorised over
  prompts): dual-end (``K`` shortest + ``L`` longest valid, ``K + L = M``) for prompts with
  ``M'_i < M_up``, shortest-only (tail pruning) for prompts with ``M'_i = M_up``.
- :class:`GroupRollout` is the streaming form a rollout driver feeds finished samples to. For a
  pruned prompt it says "complete, abort these" as soon as ``M`` valid samples have finished
  (proactive early stop); for a dual-end prompt it waits for the whole pool, because the longest
  valid sample is only known at the end. :meth:`GroupRollout.surely_kept` names the finished
  samples whose place in the group is already certain, so a driver can stream them to the trainer
  before the group ends (§4.3.2); :meth:`GroupRollout.sample_lost` takes a candidate that can never
  finish (its worker died) out of the pool, as an abort would.

"Valid" means complete: a sample stopped at the length limit (``truncated``) is never chosen as a
"longest" one (§4.1.2) and does not count towards early stop; it is kept only when a group lacks
enough valid samples to reach ``M``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

_VALID, _TRUNCATED, _ABSENT = 0, 1, 2


class SamplingMode(enum.Enum):
    DUAL_END = "dual_end"
    SHORTEST_ONLY = "shortest_only"


def sampling_mode(allocated: int, upper: int, *, tail_pruning: bool = True) -> SamplingMode:
    """Alg. 2 line 3: dual-end while ``M'_i < M_up``; tail pruning once the budget saturates."""
    if tail_pruning and allocated >= upper:
        return SamplingMode.SHORTEST_ONLY
    return SamplingMode.DUAL_END


def select_training_groups(
    lengths: np.ndarray,
    present: np.ndarray,
    truncated: np.ndarray,
    shortest_only: np.ndarray,
    *,
    group_size: int,
    longest: int = 1,
) -> np.ndarray:
    """Kept-sample mask (same shape as ``lengths``: prompts × candidate slots).

    ``present`` marks slots holding a finished sample (unallocated and aborted slots are absent);
    ``truncated`` marks samples stopped at the length limit; ``shortest_only`` (per prompt) selects
    tail pruning. Each row keeps ``min(group_size, present)`` samples; ties go to the lower slot.
    """
    lengths = np.asarray(lengths, dtype=float)
    present = np.asarray(present, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool) & present
    pruned = np.asarray(shortest_only, dtype=bool)
    if lengths.ndim != 2 or present.shape != lengths.shape or truncated.shape != lengths.shape:
        raise ValueError("lengths, present and truncated must be 2-D arrays of one shape")
    if pruned.shape != (lengths.shape[0],):
        raise ValueError("shortest_only needs one flag per prompt")
    if not 0 <= longest <= group_size:
        raise ValueError(f"need 0 <= longest <= group_size, got {longest} and {group_size}")
    shortest = group_size - longest

    rows, slots = lengths.shape
    take = min(group_size, slots)
    # One stable sort per row by (valid < truncated < absent, length); ties keep slot order.
    finite = np.where(present, lengths, 0.0)
    span = float(np.abs(finite).max(initial=0.0)) * 2.0 + 1.0
    category = np.where(present, np.where(truncated, _TRUNCATED, _VALID), _ABSENT)
    short_order = np.argsort(category * span + finite, axis=-1, kind="stable")

    short_quota = np.where(pruned, group_size, shortest)[:, None]
    head = short_order[:, :take]
    chosen_head = (np.arange(take)[None, :] < short_quota) & np.take_along_axis(
        present, head, axis=-1
    )
    kept = np.zeros((rows, slots), dtype=bool)
    np.put_along_axis(kept, head, chosen_head, axis=-1)

    if longest > 0:
        long_candidate = present & ~truncated & ~kept & ~pruned[:, None]
        long_key = np.where(long_candidate, -finite, np.inf)
        if longest == 1:  # the paper's L (§5.6): the first minimum is the stable sort's head
            long_head = np.argmin(long_key, axis=-1)[:, None]
        else:
            long_head = np.argsort(long_key, axis=-1, kind="stable")[:, : min(longest, slots)]
        chosen_long = np.take_along_axis(long_candidate, long_head, axis=-1)
        long_kept = np.zeros_like(kept)
        np.put_along_axis(long_kept, long_head, chosen_long, axis=-1)
        kept |= long_kept

    # Too few valid long samples: top up with the next-shortest remaining ones (truncated).
    missing = np.minimum(group_size, present.sum(axis=1)) - kept.sum(axis=1)
    if np.any(missing > 0):
        spare = present & ~kept
        spare_in_order = np.take_along_axis(spare, short_order, axis=-1)
        spare_rank_in_order = np.cumsum(spare_in_order, axis=-1) - 1
        take_in_order = spare_in_order & (spare_rank_in_order < missing[:, None])
        top_up = np.zeros_like(kept)
        np.put_along_axis(top_up, short_order, take_in_order, axis=-1)
        kept |= top_up
    return kept


@dataclass(frozen=True)
class GroupDecision:
    """What a rollout driver must do after reporting a finished sample."""

    complete: bool
    abort: tuple[int, ...] = ()


@dataclass
class GroupRollout:
    """One prompt's candidate pool as it streams in (Alg. 2 lines 3–13).

    Samples are numbered ``0 .. allocated−1``. Feed every finished sample to
    :meth:`sample_finished`; once it answers ``complete``, abort the listed samples and read
    :meth:`kept`.
    """

    allocated: int
    group_size: int
    upper: int
    longest: int = 1
    tail_pruning: bool = True
    _lengths: dict[int, float] = field(default_factory=dict, init=False, repr=False)
    _truncated: dict[int, bool] = field(default_factory=dict, init=False, repr=False)
    _aborted: tuple[int, ...] = field(default=(), init=False, repr=False)
    _lost: set[int] = field(default_factory=set, init=False, repr=False)
    _complete: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.allocated < self.group_size:
            raise ValueError(f"allocated {self.allocated} < group_size {self.group_size}")
        if not 0 <= self.longest <= self.group_size:
            raise ValueError("need 0 <= longest <= group_size")

    @property
    def mode(self) -> SamplingMode:
        return sampling_mode(self.allocated, self.upper, tail_pruning=self.tail_pruning)

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def aborted(self) -> tuple[int, ...]:
        return self._aborted

    @property
    def valid_finished(self) -> int:
        return sum(1 for t in self._truncated.values() if not t)

    def running(self) -> tuple[int, ...]:
        """Samples neither finished nor aborted."""
        if self._complete:
            return ()
        return tuple(
            s for s in range(self.allocated) if s not in self._lengths and s not in self._lost
        )

    @property
    def lost(self) -> tuple[int, ...]:
        return tuple(sorted(self._lost))

    def sample_finished(self, sample: int, length: float, truncated: bool) -> GroupDecision:
        """Record a finished sample; say whether the group is complete and what to abort.

        A report arriving after completion (a sample that finished while its abort was in flight)
        is ignored.
        """
        if not 0 <= sample < self.allocated:
            raise ValueError(f"sample {sample} outside 0..{self.allocated - 1}")
        if self._complete:
            return GroupDecision(complete=True)
        if sample in self._lengths or sample in self._lost:
            raise ValueError(f"sample {sample} reported twice")
        self._lengths[sample] = float(length)
        self._truncated[sample] = bool(truncated)
        return self._decide()

    def sample_lost(self, sample: int) -> GroupDecision:
        """A candidate that will never finish (its worker was lost): absent from the pool, as an
        aborted one is. The group then completes on the candidates left; a driver that needs
        ``M`` samples re-runs a lost one instead of reporting it (a fresh draw of the same slot).
        """
        if not 0 <= sample < self.allocated:
            raise ValueError(f"sample {sample} outside 0..{self.allocated - 1}")
        if self._complete:
            return GroupDecision(complete=True)
        if sample in self._lengths or sample in self._lost:
            raise ValueError(f"sample {sample} reported twice")
        self._lost.add(sample)
        return self._decide()

    def _decide(self) -> GroupDecision:
        all_finished = len(self._lengths) + len(self._lost) == self.allocated
        early_stop = (
            self.mode is SamplingMode.SHORTEST_ONLY and self.valid_finished >= self.group_size
        )
        if not (all_finished or early_stop):
            return GroupDecision(complete=False)
        self._complete = True
        self._aborted = tuple(
            s for s in range(self.allocated) if s not in self._lengths and s not in self._lost
        )
        return GroupDecision(complete=True, abort=self._aborted)

    def surely_kept(self, running_floors: Mapping[int, int]) -> tuple[int, ...]:
        """Finished samples certain to be in the training group whatever the rest do (§4.3.2:
        hand each kept sample to the trainer as soon as that is known, not at the group's end).

        ``running_floors``: tokens each running sample has produced so far, a lower bound on its
        final length (absent: 0). A running sample may still finish at its floor, and may be
        aborted or lost (which only removes candidates), so a finished valid sample is settled
        in the ``K`` shortest when fewer than ``K`` samples can still rank before it by
        :func:`select_training_groups`' order (valid before truncated, length, then slot).
        Under tail pruning every valid finished sample is kept (early stop keeps exactly the
        first ``M`` valid ones); when no more than ``M`` candidates remain, every one is kept.
        Truncated samples and the ``L`` longest are only known when the group completes.
        """
        if self._complete:
            return self.kept()
        if self.allocated - len(self._lost) <= self.group_size:
            return tuple(sorted(self._lengths))
        valid = sorted((length, s) for s, length in self._lengths.items() if not self._truncated[s])
        if self.mode is SamplingMode.SHORTEST_ONLY:
            return tuple(sorted(s for _, s in valid))
        quota = self.group_size - self.longest
        floors = sorted((float(running_floors.get(r, 0)), r) for r in self.running())
        settled = []
        for rank, key in enumerate(valid):  # ``rank`` finished valid samples precede ``key``
            if rank >= quota:
                break
            could_precede = rank + sum(1 for floor in floors if floor < key)
            if could_precede < quota:
                settled.append(key[1])
        return tuple(sorted(settled))

    def kept(self) -> tuple[int, ...]:
        """The training group's sample numbers (Alg. 2's ``Y_i``), via the batch selection rule."""
        if not self._complete:
            raise RuntimeError("group not complete yet")
        lengths = np.zeros((1, self.allocated))
        present = np.zeros((1, self.allocated), dtype=bool)
        truncated = np.zeros((1, self.allocated), dtype=bool)
        for sample, length in self._lengths.items():
            lengths[0, sample] = length
            present[0, sample] = True
            truncated[0, sample] = self._truncated[sample]
        mask = select_training_groups(
            lengths,
            present,
            truncated,
            np.array([self.mode is SamplingMode.SHORTEST_ONLY]),
            group_size=self.group_size,
            longest=self.longest,
        )
        return tuple(int(s) for s in np.flatnonzero(mask[0]))
