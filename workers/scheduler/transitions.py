"""The action state machine, once: every writer of an action's status derives from this table.

An action moves queued → scheduled → running → succeeded / failed / timed_out, may be cancelled
while active, and goes back to queued when its agent is lost. Each transition is a conditional
write (``UPDATE … WHERE id = … AND status IN (sources)``, STYLE.md §5): the sources are the
guard, so a finish never overwrites a cancel and two schedulers never both place one action.

The writers are the scheduler's SQL store (``apps.actions.scheduler_store``: set-based
PostgreSQL, single-row and SQLite forms), the cancel services (``apps.actions.services``) and
the scheduler tests' in-memory store. Pure Python, no Django: ``workers/`` imports it too.

``attempts`` counts when an action is *scheduled*, not when it starts running: the dispatch
carries its attempt number and the agent's result names it back, so the number must be durable
before the dispatch leaves. A scheduler restarted between the two then never hands out the same
attempt twice, and a late result of an old attempt is recognised as stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

QUEUED = "queued"
SCHEDULED = "scheduled"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
TIMED_OUT = "timed_out"

ALLOCATED = (SCHEDULED, RUNNING)
ACTIVE = (QUEUED, *ALLOCATED)
TERMINAL = (SUCCEEDED, FAILED, CANCELLED, TIMED_OUT)

# The most of an action's output any writer stores (the agent may send more).
OUTPUT_LIMIT_CHARS = 1_000_000


@dataclass(frozen=True)
class Transition:
    """One edge set of the state machine.

    ``sources``: the statuses it may move from (the writer's guard). ``targets``: the statuses
    it may write. ``sets``: every column it writes, ``status`` included; ``cleared`` of those
    are always written NULL. ``counts_attempt``: whether it writes the attempt number.
    """

    name: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    sets: tuple[str, ...]
    cleared: tuple[str, ...] = ()

    @property
    def counts_attempt(self) -> bool:
        return "attempts" in self.sets

    def allows(self, status: str) -> bool:
        return status in self.sources

    def columns(self, status: str | None = None, **values: Any) -> dict[str, Any]:
        """The columns this transition writes, ``cleared`` ones NULL and ``output`` capped;
        raises ValueError for a status it cannot write or a column it does not set."""
        target = status if status is not None else self.targets[0]
        if target not in self.targets:
            raise ValueError(f"{self.name} ends in one of {self.targets}, not {target!r}")
        expected = set(self.sets) - set(self.cleared) - {"status"}
        if set(values) != expected:
            raise ValueError(f"{self.name} sets {sorted(expected)}, not {sorted(values)}")
        written: dict[str, Any] = {"status": target, **dict.fromkeys(self.cleared), **values}
        if "output" in written:
            written["output"] = cap_output(written["output"])
        return written


SCHEDULE = Transition(
    "schedule",
    sources=(QUEUED,),
    targets=(SCHEDULED,),
    sets=("status", "allocation", "node_id", "scheduled_at", "attempts"),
)
START = Transition("start", sources=(SCHEDULED,), targets=(RUNNING,), sets=("status", "started_at"))
# A queued action may end too: a demand no node can ever satisfy fails without being placed. An
# agent may report ``cancelled`` (it stopped the action on the scheduler's order), hence any end.
FINISH = Transition(
    "finish",
    sources=ACTIVE,
    targets=TERMINAL,
    sets=(
        "status",
        "finished_at",
        "started_at",
        "exit_code",
        "output",
        "error_reason",
        "score",
        "service_timings",
        "cache_events",
    ),
)
CANCEL = Transition(
    "cancel",
    sources=ACTIVE,
    targets=(CANCELLED,),
    sets=("status", "finished_at", "error_reason"),
)
REQUEUE = Transition(
    "requeue",
    sources=ALLOCATED,
    targets=(QUEUED,),
    sets=("status", "allocation", "node_id", "scheduled_at", "started_at", "error_reason"),
    cleared=("allocation", "node_id", "scheduled_at", "started_at"),
)

TRANSITIONS: Mapping[str, Transition] = {
    t.name: t for t in (SCHEDULE, START, FINISH, CANCEL, REQUEUE)
}


def cap_output(output: str) -> str:
    return output[:OUTPUT_LIMIT_CHARS]
