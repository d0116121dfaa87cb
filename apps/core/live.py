"""Live updates, inverted: the app that changes a pool, node or job says so; the dashboard listens.

The apps are layered (``[tool.importlinter]`` in pyproject.toml), so resources, policies and actions
may not import the dashboard that shows their changes live. This hook sits below them all:

- the one service that owns a state change (a node drained, a policy saved, an action cancelled)
  calls :func:`changed_on_commit` inside its transaction, and once it commits every registered
  receiver hears which objects changed and reads their fresh state itself: a rolled-back change is
  never shown (AWX sends ``websocket_emit_status`` from ``transaction.on_commit`` the same way);
- a pool's scheduler, which computes its snapshots from memory, hands each one to
  :func:`pool_snapshot_publish`.

The dashboard registers its receivers in ``DashboardConfig.ready()``; a process without it
registers none, and nothing is sent. Submissions announce nothing here: their pool's scheduler
publishes its snapshot on every arrival, and a busy job would otherwise cost a snapshot per submit.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction

Subject = Literal["pool", "node", "job"]


@dataclass(frozen=True, slots=True)
class Change:
    """One object whose state changed: a pool by name, a node or a job by id."""

    subject: Subject
    key: str


ChangeReceiver = Callable[[Sequence[Change]], None]
PoolSnapshotReceiver = Callable[[str, Mapping[str, Any]], Awaitable[None]]

_change_receivers: list[ChangeReceiver] = []
_pool_snapshot_receivers: list[PoolSnapshotReceiver] = []


def live_receiver_register(
    *,
    changes: ChangeReceiver | None = None,
    pool_snapshots: PoolSnapshotReceiver | None = None,
) -> None:
    """Hear committed changes and the schedulers' pool snapshots (once per receiver)."""
    if changes is not None and changes not in _change_receivers:
        _change_receivers.append(changes)
    if pool_snapshots is not None and pool_snapshots not in _pool_snapshot_receivers:
        _pool_snapshot_receivers.append(pool_snapshots)


def _deliver(changes: Sequence[Change]) -> None:
    for receiver in list(_change_receivers):
        receiver(changes)


def changed_on_commit(changes: Sequence[Change]) -> None:
    """Tell the receivers about ``changes`` once the current transaction commits (at once outside
    one). A receiver that fails is logged by Django and never fails the change (``robust``)."""
    if changes and _change_receivers:
        transaction.on_commit(functools.partial(_deliver, tuple(changes)), robust=True)


async def pool_snapshot_publish(pool: str, snapshot: Mapping[str, Any]) -> None:
    """A scheduler's snapshot of ``pool`` (``SchedulerService(publish_snapshot=...)``)."""
    for receiver in list(_pool_snapshot_receivers):
        await receiver(pool, snapshot)
