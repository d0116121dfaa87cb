"""Typed views of Loom's API objects, with the ACT breakdown computed from the four timestamps."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "timed_out"})


def _time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _seconds(later: dt.datetime | None, earlier: dt.datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


@dataclass(frozen=True)
class Timings:
    """The four timestamps of an action (arl-tangram §2.4: ACT = finished − submitted)."""

    submitted_at: dt.datetime | None
    scheduled_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @property
    def act_s(self) -> float | None:
        """Action completion time."""
        return _seconds(self.finished_at, self.submitted_at)

    @property
    def queueing_s(self) -> float | None:
        return _seconds(self.scheduled_at, self.submitted_at)

    @property
    def execution_s(self) -> float | None:
        return _seconds(self.finished_at, self.started_at)

    @property
    def overhead_s(self) -> float | None:
        """Dispatch overhead: scheduled → started on the agent."""
        return _seconds(self.started_at, self.scheduled_at)


@dataclass(frozen=True)
class Action:
    """An action as Loom reports it; ``done`` once it reached a terminal status."""

    id: int
    status: str
    job: int | None
    trajectory: int | None
    tool: str | None
    idempotency_key: str | None
    exit_code: int | None
    output: str
    output_truncated: bool
    score: float | None
    error_reason: str
    allocation: dict[str, Any] | None
    attempts: int
    timings: Timings
    raw: dict[str, Any] = field(repr=False, compare=False)
    # A GPU service action's report from its agent: queue_s, restore_s and execute_s, and the
    # service-cache events (restores, evictions) it caused; None for other actions.
    service_timings: dict[str, float] | None = None
    cache_events: list[dict[str, Any]] | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @classmethod
    def from_api(cls, body: dict[str, Any]) -> Action:
        result = body.get("result") or {}
        return cls(
            id=int(body["id"]),
            status=str(body["status"]),
            job=body.get("job"),
            trajectory=body.get("trajectory"),
            tool=body.get("tool"),
            idempotency_key=body.get("idempotency_key"),
            exit_code=result.get("exit_code", body.get("exit_code")),
            output=result.get("output", body.get("output")) or "",
            output_truncated=bool(result.get("output_truncated", body.get("output_truncated"))),
            score=result.get("score", body.get("score")),
            error_reason=result.get("error_reason", body.get("error_reason")) or "",
            allocation=body.get("allocation"),
            attempts=int(body.get("attempts") or 0),
            timings=Timings(
                submitted_at=_time(body.get("submitted_at")),
                scheduled_at=_time(body.get("scheduled_at")),
                started_at=_time(body.get("started_at")),
                finished_at=_time(body.get("finished_at")),
            ),
            raw=body,
            service_timings=body.get("service_timings"),
            cache_events=body.get("cache_events"),
        )
