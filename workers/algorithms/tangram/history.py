"""Running duration averages per tool/service, for actions without a profile (arl-tangram §4.2).

The paper needs exact durations only for scalable actions; for the rest "it is acceptable to be
approximated by historical averages". We keep the mean *single-unit* duration per tool: an
observed duration at ``m`` units of an elastic action is scaled back by ``E(m)·m``.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.algorithms.tangram.action import ActionSpec


@dataclass
class _RunningMean:
    count: int = 0
    mean: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        self.mean += (value - self.mean) / self.count


class DurationHistory:
    """Mean observed single-unit duration per tool; ``default_seconds`` before any observation."""

    def __init__(self, default_seconds: float = 1.0) -> None:
        if default_seconds < 0:
            raise ValueError("default_seconds must be >= 0")
        self.default_seconds = default_seconds
        self._by_tool: dict[str, _RunningMean] = {}

    def record(self, spec: ActionSpec, key_units: int, seconds: float) -> None:
        if seconds < 0:
            return
        single_unit = seconds
        if spec.elasticity is not None and key_units > 0:
            single_unit = seconds * spec.elasticity.speedup(key_units)
        self._by_tool.setdefault(spec.tool, _RunningMean()).add(single_unit)

    def mean(self, tool: str) -> float | None:
        stat = self._by_tool.get(tool)
        return None if stat is None or stat.count == 0 else stat.mean

    def observations(self, tool: str) -> int:
        """How many durations of ``tool`` were recorded: a stamp for cached estimates."""
        stat = self._by_tool.get(tool)
        return 0 if stat is None else stat.count

    def t1(self, spec: ActionSpec) -> float:
        """The profiled ``T1`` when known, else the history mean, else the default."""
        if spec.t1 is not None:
            return spec.t1
        observed = self.mean(spec.tool)
        return self.default_seconds if observed is None else observed

    def snapshot(self) -> dict[str, tuple[int, float]]:
        return {tool: (s.count, s.mean) for tool, s in self._by_tool.items()}
