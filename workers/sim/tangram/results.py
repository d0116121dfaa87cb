"""Per-action records and the summaries every Tangram scenario and baseline reports."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ActionRecord:
    action_id: str
    trajectory_id: str
    kind: str
    submitted: float
    started: float = float("nan")
    finished: float = float("nan")
    dop: int = 1
    load_s: float = 0.0
    attempts: int = 1
    failed: bool = False

    @property
    def act(self) -> float:
        """Action completion time (arl-tangram Eq. 2): queueing + execution."""
        return self.finished - self.submitted


@dataclass
class SimResult:
    name: str
    records: list[ActionRecord] = field(default_factory=list)
    makespan: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def acts(self, kind: str | None = None) -> list[float]:
        return [r.act for r in self.records if kind is None or r.kind == kind]

    def mean_act(self, kind: str | None = None) -> float:
        values = self.acts(kind)
        return statistics.fmean(values) if values else float("nan")

    def percentile_act(self, q: float, kind: str | None = None) -> float:
        values = sorted(self.acts(kind))
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q * len(values)))]

    def mean_trajectory_act(self) -> float:
        """Total ACT per trajectory, averaged over trajectories (arl-tangram §6.3)."""
        totals: dict[str, float] = defaultdict(float)
        for record in self.records:
            totals[record.trajectory_id] += record.act
        return statistics.fmean(totals.values()) if totals else float("nan")

    def summary(self) -> dict[str, Any]:
        kinds = sorted({r.kind for r in self.records})
        return {
            "actions": len(self.records),
            "mean_act_s": self.mean_act(),
            "p99_act_s": self.percentile_act(0.99),
            "mean_trajectory_act_s": self.mean_trajectory_act(),
            "mean_act_by_kind_s": {k: self.mean_act(k) for k in kinds},
            "mean_queue_s": statistics.fmean(r.started - r.submitted for r in self.records)
            if self.records
            else float("nan"),
            "failed": sum(1 for r in self.records if r.failed),
            "makespan_s": self.makespan,
            **self.extra,
        }
