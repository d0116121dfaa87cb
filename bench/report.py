"""The one result shape every benchmark writes (DESIGN.md "Performance and reliability targets")."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Target:
    """A measured value compared with its goal, e.g. ``Target.at_least("speedup", 3.4, 3.0)``."""

    name: str
    value: float
    target: str
    met: bool

    @classmethod
    def at_least(cls, name: str, value: float, bound: float) -> Target:
        return cls(name=name, value=float(value), target=f">= {bound:g}", met=value >= bound)

    @classmethod
    def at_most(cls, name: str, value: float, bound: float) -> Target:
        return cls(name=name, value=float(value), target=f"<= {bound:g}", met=value <= bound)

    @classmethod
    def is_true(cls, name: str, condition: bool) -> Target:
        return cls(name=name, value=float(bool(condition)), target="== 1", met=bool(condition))


@dataclass
class BenchReport:
    benchmark: str
    quick: bool
    params: dict[str, Any] = field(default_factory=dict)
    series: dict[str, Any] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    started: str = field(
        default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    )

    def skip(self, reason: Exception, needed: str = "postgres_and_redis_available") -> BenchReport:
        """The benchmark could not run here: say why, and fail the ``needed`` target."""
        self.params["skipped"] = str(reason)
        self.targets.append(Target.is_true(needed, False))
        return self

    @property
    def all_met(self) -> bool:
        return all(t.met for t in self.targets)

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "quick": self.quick,
            "machine": machine_description(),
            "started": self.started,
            "params": self.params,
            "series": self.series,
            "targets": [t.__dict__ for t in self.targets],
        }

    def write(self, results_dir: Path = RESULTS_DIR) -> Path:
        """``NAME.json``, or ``NAME_quick.json`` for a ``--quick`` run: a quick run never
        overwrites the full run's results beside it."""
        results_dir.mkdir(parents=True, exist_ok=True)
        suffix = "_quick" if self.quick else ""
        path = results_dir / f"{self.benchmark}{suffix}.json"
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        return path


def machine_description() -> str:
    cores = os.cpu_count() or 0
    try:
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{mem_kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        memory = "unknown memory"
    return f"{cores} cores, {memory}, {platform.machine()}, Python {platform.python_version()}"


def plot_path(benchmark: str, suffix: str = "") -> Path:
    """Where a benchmark saves its PNG (beside the JSON)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    return RESULTS_DIR / f"{benchmark}{suffix}.png"


def plot_mean_act_by_batch(ax: Any, rows: list[dict[str, Any]], approaches: Iterable[str]) -> None:
    """One line of mean ACT per approach over the rows' batch sizes, on a log scale (the
    Tangram benches' ``by_batch`` series: ``{"batch": …, "approaches": {name: summary}}``)."""
    batches = [r["batch"] for r in rows]
    for approach in approaches:
        means = [r["approaches"][approach]["mean_act_s"] for r in rows]
        ax.plot(batches, means, marker="o", label=approach)
    ax.set_yscale("log")
    ax.set_ylabel("mean ACT (s)")
