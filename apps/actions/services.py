"""Writes for actions from the web side: submission (single, batch, or single and awaited) and
cancellation, which wakes the action's waiters and shows its job live once committed.

The other transitions (schedule, start, finish, requeue) are the scheduler's, written by its
store (``scheduler_store.DjangoActionStore``). Every one, cancel included, is a conditional
UPDATE whose guard and columns come from ``workers.scheduler.transitions``: the row count says
whether this caller won, so two writers can never both move one action (STYLE.md §5).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.actions.hot_path import flush_commits, insert_action
from apps.actions.models import Action, ActionStatus
from apps.actions.notify import publish_action_ended
from apps.actions.pool_events import announce_cancelled, announce_replayed, announce_submitted
from apps.actions.waiting import SubmitWait
from apps.core.demand import Demand
from apps.core.live import Change, changed_on_commit
from apps.jobs.models import Job
from controlplane.http_bridge import Hangup
from workers.scheduler.transitions import CANCEL

# Called with each new action after its INSERT, before its scheduler can hear of it.
BeforeAnnounce = Callable[[Action], object]
IN_CLAUSE_CHUNK = 500


@dataclass(frozen=True)
class ActionSpec:
    """One validated submission (the API's InputSerializer produces these)."""

    demand: Demand
    tool_id: int | None = None
    service_id: int | None = None
    trajectory_id: int | None = None
    pool_id: int | None = None
    command: str = ""
    payload: Any = None
    request: Any = None
    priority: int = 0
    single_unit_duration_s: float | None = None
    timeout_s: float | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Submitted:
    action: Action
    created: bool


def _build(*, job: Job, spec: ActionSpec, now: datetime) -> Action:
    key = spec.demand.key
    return Action(
        job=job,
        trajectory_id=spec.trajectory_id,
        tool_id=spec.tool_id,
        service_id=spec.service_id,
        pool_id=spec.pool_id,
        command=spec.command,
        payload=spec.payload,
        request=spec.request,
        priority=spec.priority,
        demand=spec.demand.as_json(),
        elasticity=spec.demand.elasticity,
        key_resource=spec.demand.key_resource,
        min_units=key.minimum,
        max_units=key.maximum,
        single_unit_duration_s=spec.single_unit_duration_s,
        timeout_s=spec.timeout_s,
        status=ActionStatus.QUEUED,
        submitted_at=now,
        idempotency_key=spec.idempotency_key,
    )


def _existing_by_key(*, job: Job, keys: Iterable[str]) -> dict[str, Action]:
    unique_keys = sorted(set(keys))
    found: dict[str, Action] = {}
    for start in range(0, len(unique_keys), IN_CLAUSE_CHUNK):
        chunk = unique_keys[start : start + IN_CLAUSE_CHUNK]
        for action in Action.objects.filter(job=job, idempotency_key__in=chunk):
            assert action.idempotency_key is not None
            found[action.idempotency_key] = action
    return found


def _submit_one(
    *, job: Job, spec: ActionSpec, before_announce: BeforeAnnounce | None, durable: bool = True
) -> Submitted:
    """One action, optimistically: a single INSERT in autocommit (all-or-nothing already, one
    round trip instead of BEGIN, SELECT by key, INSERT, COMMIT). Only when its idempotency key
    is taken does it read the action that holds it."""
    action = _build(job=job, spec=spec, now=timezone.now())
    try:
        insert_action(action, durable=durable)
    except IntegrityError:
        if spec.idempotency_key is None:
            raise
        existing = _existing_by_key(job=job, keys=[spec.idempotency_key])
        if spec.idempotency_key not in existing:
            raise  # not the key: some other constraint failed
        announce_replayed([existing[spec.idempotency_key]])
        return Submitted(action=existing[spec.idempotency_key], created=False)
    if before_announce is not None:
        before_announce(action)
    announce_submitted([action])
    return Submitted(action=action, created=True)


def _submit_batch_once(
    *, job: Job, specs: Sequence[ActionSpec], before_announce: BeforeAnnounce | None = None
) -> list[Submitted]:
    existing = _existing_by_key(
        job=job, keys=(spec.idempotency_key for spec in specs if spec.idempotency_key)
    )
    now = timezone.now()
    results: list[Submitted] = []
    new_actions: list[Action] = []
    replayed: list[Action] = []
    fresh_keys: set[str] = set()  # keys first used in this batch: their repeats are no replays
    for spec in specs:
        key = spec.idempotency_key
        if key is not None and key in existing:
            results.append(Submitted(action=existing[key], created=False))
            if key not in fresh_keys:
                replayed.append(existing[key])
            continue
        action = _build(job=job, spec=spec, now=now)
        new_actions.append(action)
        if key is not None:
            existing[key] = action  # a repeat later in this batch gets the same action
            fresh_keys.add(key)
        results.append(Submitted(action=action, created=True))
    with transaction.atomic():
        Action.objects.bulk_create(new_actions)
        if before_announce is not None:
            for action in new_actions:
                before_announce(action)  # before the commit, hence before the announcement
        announce_submitted(new_actions)
        announce_replayed(replayed)
    return results


def action_submit_batch(
    *, job: Job, specs: Sequence[ActionSpec], before_announce: BeforeAnnounce | None = None
) -> list[Submitted]:
    """Insert all actions in bulk (all or nothing), honouring idempotency keys.

    A key already used by this job returns the existing action (``created=False``); a key repeated
    inside the batch maps every repeat to the first one. A concurrent submitter racing us to the
    same key makes the INSERT fail on the unique constraint; we then re-read and retry once.
    """
    for attempt in (1, 2):
        try:
            return _submit_batch_once(job=job, specs=specs, before_announce=before_announce)
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def action_submit(
    *,
    job: Job,
    spec: ActionSpec,
    before_announce: BeforeAnnounce | None = None,
    durable: bool = True,
) -> Submitted:
    """Submit one action. ``before_announce`` sees a new action after its INSERT and before its
    scheduler can hear of it (e.g. to subscribe to its end).

    ``durable=False``: for a caller that answers only once the action has ended (its end is
    committed synchronously, which makes the insert durable too) or after
    ``hot_path.flush_commits``; the insert then does not wait for its own WAL flush
    (``hot_path.insert_action``).
    """
    connection = transaction.get_connection()
    if connection.in_atomic_block or connection.vendor != "postgresql":
        # Inside a caller's transaction a failed INSERT would poison it; SQLite's autocommit
        # writes do not wait for a lock (BEGIN IMMEDIATE does). Take the batch path, which looks
        # the key up first and inserts in a transaction (announced on commit).
        return action_submit_batch(job=job, specs=[spec], before_announce=before_announce)[0]
    return _submit_one(job=job, spec=spec, before_announce=before_announce, durable=durable)


def action_submit_and_wait(
    *, job: Job, spec: ActionSpec, wait: float, hangup: Hangup | None = None
) -> Submitted:
    """Submit one action and answer once it has ended or ``wait`` seconds have passed (the
    sequence is ``waiting``'s); with no wait, plain ``action_submit``.

    Waiting, the insert need not wait for its WAL flush: the answer comes after the end's own
    synchronous commit, or after ``hot_path.flush_commits`` when the wait runs out first.
    """
    with SubmitWait(seconds=wait, hangup=hangup) as end:
        submitted = action_submit(
            job=job, spec=spec, before_announce=end.subscribe, durable=wait <= 0
        )
        end.until_ended(submitted.action)
        if wait > 0 and not submitted.action.is_terminal:
            flush_commits()  # answered before its end: its insert on disk first
    return submitted


def _on_commit_publish(action_ids: list[int], job_ids: Iterable[int]) -> None:
    """Wake the ends' waiters and show the jobs' new counts live, once committed."""
    if action_ids:
        transaction.on_commit(functools.partial(publish_action_ended, action_ids))
        changed_on_commit([Change("job", str(job_id)) for job_id in sorted(set(job_ids))])


def action_cancel(
    *, action_id: int, reason: str = "cancelled by the user", now: datetime | None = None
) -> bool:
    """queued/scheduled/running → cancelled; False if it had already ended."""
    active = Action.objects.filter(pk=action_id, status__in=CANCEL.sources)
    with transaction.atomic():
        pool_id, job_id = active.values_list("pool_id", "job_id").first() or (None, None)
        changed = active.update(
            **CANCEL.columns(finished_at=now or timezone.now(), error_reason=reason)
        )
        if changed == 1:
            _on_commit_publish([action_id], [job_id] if job_id is not None else [])
            announce_cancelled([(action_id, pool_id)])
    return changed == 1


def action_cancel_many(
    *, action_ids: Iterable[int], reason: str, now: datetime | None = None
) -> list[int]:
    """Cancel every still-active action of ``action_ids``; returns the ids that were cancelled."""
    moment = now or timezone.now()
    cancelled: list[tuple[int, int | None]] = []
    job_ids: set[int] = set()
    ids = list(action_ids)
    with transaction.atomic():
        for start in range(0, len(ids), IN_CLAUSE_CHUNK):
            chunk = ids[start : start + IN_CLAUSE_CHUNK]
            active = list(
                Action.objects.select_for_update()
                .filter(pk__in=chunk, status__in=CANCEL.sources)
                .values_list("pk", "pool_id", "job_id")
            )
            Action.objects.filter(
                pk__in=[pk for pk, _, _ in active], status__in=CANCEL.sources
            ).update(**CANCEL.columns(finished_at=moment, error_reason=reason))
            cancelled.extend((pk, pool_id) for pk, pool_id, _ in active)
            job_ids.update(job_id for _, _, job_id in active)
        _on_commit_publish([pk for pk, _ in cancelled], job_ids)
        announce_cancelled(cancelled)
    return [pk for pk, _ in cancelled]
