"""Plain records exchanged between the scheduler service and its store (no Django types)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ActionKind = Literal["cpu", "api", "gpu"]


@dataclass(frozen=True)
class ActionRecord:
    """An active action as the store knows it; times are epoch seconds."""

    action_id: int
    job_id: int
    kind: ActionKind
    demand: dict[str, Any]
    submitted_at: float
    status: str = "queued"
    attempts: int = 0
    timeout_s: float = 600.0
    tool: str = "default"
    command: str | None = None
    api_request: dict[str, Any] | None = None
    elasticity: dict[str, Any] | None = None
    single_unit_duration_s: float | None = None
    trajectory_id: int | None = None
    idempotent: bool = False
    network: bool = False
    node: str | None = None
    allocation: dict[str, Any] | None = None
    env: dict[str, str] = field(default_factory=dict)
    # A gpu action (arl-tangram §5.3): the service it runs on, its JSON input, its priority.
    service: str | None = None
    request: Any = None
    priority: int = 0


@dataclass(frozen=True)
class ScheduledUpdate:
    """queued → scheduled with its allocation (written before the dispatch is sent)."""

    action_id: int
    attempt: int
    node: str
    allocation: dict[str, Any]
    scheduled_at: float


@dataclass(frozen=True)
class FinishUpdate:
    """scheduled/running → a terminal status, with the agent's result."""

    action_id: int
    attempt: int
    status: str
    finished_at: float
    started_at: float | None = None
    exit_code: int | None = None
    output: str = ""
    reason: str = ""
    score: float | None = None  # the result's reward, when it has one
    service_timings: dict[str, float] | None = None  # a GPU result's queue/restore/execute seconds
    cache_events: tuple[dict[str, Any], ...] = ()  # the service-cache events it caused


@dataclass(frozen=True)
class RequeueUpdate:
    """scheduled/running → queued again (its agent was lost and attempts remain)."""

    action_id: int
    reason: str


@dataclass(frozen=True)
class Applied:
    """What one ``ActionStore.apply`` changed: the actions it moved queued → scheduled (only
    these may be dispatched: the others were cancelled or ended meanwhile), and the actions of
    its finishes, whose ends it published (one that had already ended is published again: its
    waiters re-read a row that is already final)."""

    scheduled: frozenset[int] = frozenset()
    ended: tuple[int, ...] = ()
