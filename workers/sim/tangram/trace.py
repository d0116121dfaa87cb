"""Workload traces for the Tangram scenarios, and their JSONL form (the format recorded runs use).

A trace is a list of trajectories. Each trajectory starts at ``start`` (virtual seconds) and walks
its ``steps`` in order: ``{"llm": seconds}`` is LLM generation (no external resources), an
``{"action": {...}}`` step is one external invocation that must complete before the next step.
One JSON object per line, one line per trajectory::

    {"trajectory_id": "t0", "task": "coding", "start": 0.4, "memory_mb": 4096,
     "steps": [{"llm": 5.1},
               {"action": {"tool": "shell", "kind": "env", "t1": 0.31, "profiled": false,
                           "resources": {"cpu": {"min": 1, "max": 1}}}},
               {"action": {"tool": "pytest", "kind": "reward", "t1": 95.0, "profiled": true,
                           "resources": {"cpu": {"min": 1, "max": 32}},
                           "key_resource": "cpu", "elasticity": {"amdahl": 0.96}}}]}

``t1`` is the *true* single-unit duration the simulator executes; ``profiled`` says whether the
scheduler may know it (else it relies on the history average, arl-tangram §4.2).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.algorithms.tangram import ActionSpec, Elasticity, ResourceDemand


@dataclass(frozen=True)
class ActionTemplate:
    """One external invocation in a trace (see the module docstring for the JSON shape)."""

    tool: str
    kind: str
    t1: float
    resources: Mapping[str, ResourceDemand]
    profiled: bool = False
    key_resource: str | None = None
    elasticity: Mapping[str, Any] | None = None
    service: str | None = None

    def elasticity_model(self) -> Elasticity | None:
        if self.elasticity is None or self.key_resource is None:
            return None
        top = self.resources[self.key_resource].maximum
        if "amdahl" in self.elasticity:
            return Elasticity.amdahl(float(self.elasticity["amdahl"]), max(1, top))
        points = {int(k): float(v) for k, v in self.elasticity["points"].items()}
        return Elasticity.from_points(points, max(1, top))

    def to_spec(self, action_id: str, trajectory_id: str | None) -> ActionSpec:
        return ActionSpec(
            action_id=action_id,
            resources=self.resources,
            tool=self.tool,
            key_resource=self.key_resource,
            elasticity=self.elasticity_model(),
            t1=self.t1 if self.profiled else None,
            trajectory_id=trajectory_id,
            service=self.service,
            metadata={"kind": self.kind},
        )

    def true_duration(self, units: int) -> float:
        """What the action really takes at ``units`` of its key resource (Eq. 1, true T1)."""
        model = self.elasticity_model()
        if model is None:
            return self.t1
        return self.t1 / model.speedup(max(1, units))

    def to_json(self) -> dict[str, Any]:
        resources: dict[str, Any] = {}
        for name, demand in self.resources.items():
            if demand.allowed is not None:
                resources[name] = {"allowed": list(demand.allowed)}
            else:
                resources[name] = {"min": demand.minimum, "max": demand.maximum}
        out: dict[str, Any] = {
            "tool": self.tool,
            "kind": self.kind,
            "t1": self.t1,
            "profiled": self.profiled,
            "resources": resources,
        }
        if self.key_resource is not None:
            out["key_resource"] = self.key_resource
        if self.elasticity is not None:
            out["elasticity"] = dict(self.elasticity)
        if self.service is not None:
            out["service"] = self.service
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ActionTemplate:
        resources: dict[str, ResourceDemand] = {}
        for name, spec in data["resources"].items():
            if "allowed" in spec:
                resources[name] = ResourceDemand.one_of([int(u) for u in spec["allowed"]])
            else:
                resources[name] = ResourceDemand.between(int(spec["min"]), int(spec["max"]))
        return cls(
            tool=str(data["tool"]),
            kind=str(data.get("kind", "action")),
            t1=float(data["t1"]),
            resources=resources,
            profiled=bool(data.get("profiled", False)),
            key_resource=data.get("key_resource"),
            elasticity=data.get("elasticity"),
            service=data.get("service"),
        )


@dataclass(frozen=True)
class Step:
    """LLM generation (``llm_seconds``) or one action (``action``): exactly one is set."""

    llm_seconds: float | None = None
    action: ActionTemplate | None = None

    def __post_init__(self) -> None:
        if (self.llm_seconds is None) == (self.action is None):
            raise ValueError("a step is either LLM generation or an action")


@dataclass(frozen=True)
class TrajectoryTrace:
    trajectory_id: str
    task: str
    start: float
    steps: tuple[Step, ...]
    memory_mb: int = 0

    def actions(self) -> Iterator[ActionTemplate]:
        return (s.action for s in self.steps if s.action is not None)


@dataclass
class Trace:
    name: str
    trajectories: list[TrajectoryTrace]
    params: dict[str, Any] = field(default_factory=dict)

    def action_count(self) -> int:
        return sum(1 for t in self.trajectories for _ in t.actions())


def trajectory_to_json(trajectory: TrajectoryTrace) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for step in trajectory.steps:
        if step.action is not None:
            steps.append({"action": step.action.to_json()})
        else:
            steps.append({"llm": step.llm_seconds})
    return {
        "trajectory_id": trajectory.trajectory_id,
        "task": trajectory.task,
        "start": trajectory.start,
        "memory_mb": trajectory.memory_mb,
        "steps": steps,
    }


def trajectory_from_json(data: Mapping[str, Any]) -> TrajectoryTrace:
    steps = []
    for step in data["steps"]:
        if "action" in step:
            steps.append(Step(action=ActionTemplate.from_json(step["action"])))
        else:
            steps.append(Step(llm_seconds=float(step["llm"])))
    return TrajectoryTrace(
        trajectory_id=str(data["trajectory_id"]),
        task=str(data.get("task", "")),
        start=float(data.get("start", 0.0)),
        steps=tuple(steps),
        memory_mb=int(data.get("memory_mb", 0)),
    )


def save_jsonl(trace: Trace, path: Path) -> None:
    with path.open("w") as handle:
        for trajectory in trace.trajectories:
            handle.write(json.dumps(trajectory_to_json(trajectory)) + "\n")


def load_jsonl(path: Path, name: str | None = None) -> Trace:
    return Trace(name=name or path.stem, trajectories=list(parse_jsonl(path.read_text())))


def parse_jsonl(text: str | Iterable[str]) -> Iterator[TrajectoryTrace]:
    lines = text.splitlines() if isinstance(text, str) else text
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield trajectory_from_json(json.loads(line))
        except (KeyError, ValueError, TypeError) as error:
            raise ValueError(f"trace line {number}: {error}") from error
