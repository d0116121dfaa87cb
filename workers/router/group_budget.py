"""Per-job DARTS state the router keeps between group rollouts (darts §4.2.2, App. B–C).

Each job has its own per-prompt length-variance history (:class:`InMemoryLengthVarianceStore`,
fed with every group's finished lengths), its dataset-level length moments (``ρ_t``, with
aborted and length-capped samples as censored lengths), and the budget constants ``k`` and λ.
``k`` comes from the cost model once and is held (App. B Eq. 6); λ is calibrated once, on the
job's first observed group, so that Eq. 9's optimum equals ``target_multiple·N·M`` at that
``ρ`` — App. B reports budgets averaging about ``1.5·N·M`` and gives no λ. Because both are
held, the budget afterwards moves with ``ρ_t / ρ_1`` alone (``k`` cancels), which is why the
default PTL curve serves any engine. A job that changes its batch shape (``N``, ``M``) is
calibrated again. The planning itself is the one implementation, :func:`plan_batch`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from workers.algorithms.darts import (
    BatchPlan,
    DartsConfig,
    InMemoryLengthVarianceStore,
    LengthMomentsEMA,
    budget_cost_slope,
    calibrate_trade_off,
    plan_batch,
    smoothed_stds,
)
from workers.router.group_request import GroupRequest

JOBS_KEPT = 1024  # jobs whose shaping state the router holds; the least recently used leaves


@dataclass(frozen=True)
class PromptOutcome:
    """One prompt's candidates after its group: every length seen, and which are lower bounds
    (aborted by early stop or dual-end completion, or stopped at the length limit)."""

    prompt_id: str
    finished_lengths: tuple[int, ...]
    censored_lengths: tuple[int, ...]


@dataclass
class JobShaping:
    store: InMemoryLengthVarianceStore = field(default_factory=InMemoryLengthVarianceStore)
    moments: LengthMomentsEMA = field(default_factory=LengthMomentsEMA)
    cost_slope: float = 0.0
    trade_off: float | None = None
    shape: tuple[int, int] | None = None
    groups: int = 0

    def config(self, request: GroupRequest) -> DartsConfig:
        return DartsConfig(
            group_size=request.group_size,
            longest=request.longest,
            trade_off=self.trade_off or 0.0,
            tail_pruning=request.tail_pruning,
        )

    def plan(self, request: GroupRequest) -> BatchPlan:
        """Budget, allocation and modes for this group (darts Alg. 1 and Alg. 2 line 3)."""
        prompts, group_size = len(request.prompts), request.group_size
        stds = smoothed_stds(self.store, [p.prompt_id for p in request.prompts])
        config = self.config(request)
        if request.policy == "adaptive" and (prompts, group_size) != self.shape:
            self.trade_off = None  # a new batch shape: calibrate again on its first group
        total: int | None
        if request.policy == "standard":
            total = prompts * group_size
        elif request.policy == "fixed":
            total = request.total
        elif self.trade_off is None:
            total = math.floor(request.target_multiple * prompts * group_size)
        else:
            total = None  # Eq. 9 from ρ_t, λ and k
        return plan_batch(
            stds, config=config, rho=self.moments.rho, cost_slope=self.cost_slope,
            total_budget=total,
        )  # fmt: skip

    def observe(
        self, request: GroupRequest, outcomes: Sequence[PromptOutcome], *, workers: int
    ) -> None:
        """Fold a finished group into the history; calibrate k and λ on the shape's first one."""
        for outcome in outcomes:
            self.store.observe(outcome.prompt_id, outcome.finished_lengths)
        lengths = [n for o in outcomes for n in (*o.finished_lengths, *o.censored_lengths)]
        censored = [c for o in outcomes for c in (
            [False] * len(o.finished_lengths) + [True] * len(o.censored_lengths))]  # fmt: skip
        if lengths and not all(censored):
            self.moments.update(np.asarray(lengths, dtype=float), np.asarray(censored))
        self.groups += 1
        prompts, group_size = len(request.prompts), request.group_size
        if request.policy != "adaptive" or self.moments.mean is None or self.moments.std is None:
            return
        if self.trade_off is None or (prompts, group_size) != self.shape:
            self.shape = (prompts, group_size)
            self.cost_slope = budget_cost_slope(
                mean_length=self.moments.mean, std_length=self.moments.std, prompts=prompts,
                group_size=group_size, workers=max(1, workers),
            )  # fmt: skip
            self.trade_off = calibrate_trade_off(
                rho=self.moments.rho, cost_slope=self.cost_slope,
                target_budget=request.target_multiple * prompts * group_size,
            )  # fmt: skip

    def describe(self, prompt_ids: Sequence[str]) -> dict[str, object]:
        """The next step's budget inputs, as the group's statistics report them."""
        variances = self.store.variances(list(prompt_ids))
        return {
            "rho": round(self.moments.rho, 6),
            "length_mean": None if self.moments.mean is None else round(self.moments.mean, 3),
            "length_std": None if self.moments.std is None else round(self.moments.std, 3),
            "trade_off": self.trade_off,
            "cost_slope": self.cost_slope,
            "prompt_variances": [None if np.isnan(v) else round(float(v), 3) for v in variances],
        }


class ShapingBook:
    """Every job's :class:`JobShaping`, bounded (least recently used leaves first)."""

    def __init__(self, capacity: int = JOBS_KEPT) -> None:
        self.capacity = capacity
        self._jobs: OrderedDict[str, JobShaping] = OrderedDict()

    def of(self, job: str) -> JobShaping:
        shaping = self._jobs.get(job)
        if shaping is None:
            shaping = self._jobs[job] = JobShaping()
            while len(self._jobs) > self.capacity:
                self._jobs.popitem(last=False)
        self._jobs.move_to_end(job)
        return shaping
