"""Writes for buffer definitions: declare one buffer with its triggers, import a workflow's
buffers and triggers (``workers.buffers.workflow.Workflow.to_json``), delete a definition; and
the snapshots of each buffer's stats the dashboard plots (recorded, pruned).

Inputs arrive checked by ``apps.buffers.rules`` (the serializers and the admin run them); the
database still judges names (unique per job), so a name taken is ``BufferExistsError``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from apps.buffers.dataplane import BufferServiceRefused, BufferServiceUnavailable
from apps.buffers.experience import buffer_stats
from apps.buffers.models import ActorStateKind, Buffer, BufferActorState, BufferSnapshot, Trigger
from apps.jobs.models import Job
from workers.buffers.service import ACTOR_COUNTS, ACTOR_SECONDS

logger = logging.getLogger(__name__)
COUNTERS = ("held", "complete", "actors", "steps_written", "steps_dropped", "steps_evicted")


class BufferExistsError(Exception):
    """A buffer of that name is already declared in the job; ``index``: its place in a batch."""

    def __init__(self, name: str, index: int | None = None) -> None:
        super().__init__(f"buffer {name!r} is already declared in this job")
        self.name, self.index = name, index


@dataclass(frozen=True)
class TriggerSpec:
    name: str
    kind: str
    params: Mapping[str, Any]
    target: str = ""
    enabled: bool = True


@dataclass(frozen=True)
class BufferSpec:
    name: str
    schema: Mapping[str, Any]
    capacity: int
    eviction: str
    sampler: str
    sync_mode: str
    config: Mapping[str, Any] = field(default_factory=dict)
    triggers: Sequence[TriggerSpec] = ()


def _create(job: Job, spec: BufferSpec, index: int | None) -> Buffer:
    if Buffer.objects.filter(job=job, name=spec.name).exists():
        raise BufferExistsError(spec.name, index)
    try:
        with transaction.atomic():
            buffer = Buffer.objects.create(
                job=job,
                name=spec.name,
                schema=dict(spec.schema),
                capacity=spec.capacity,
                eviction=spec.eviction,
                sampler=spec.sampler,
                sync_mode=spec.sync_mode,
                config=dict(spec.config),
            )
    except IntegrityError as error:  # declared concurrently under the same name
        raise BufferExistsError(spec.name, index) from error
    Trigger.objects.bulk_create(
        Trigger(
            buffer=buffer,
            name=trigger.name,
            kind=trigger.kind,
            params=dict(trigger.params),
            target=trigger.target,
            enabled=trigger.enabled,
        )
        for trigger in spec.triggers
    )
    return buffer


@transaction.atomic
def buffer_create(*, job: Job, spec: BufferSpec) -> Buffer:
    """Declare one buffer and its triggers."""
    return _create(job, spec, None)


@transaction.atomic
def buffers_import(*, job: Job, specs: Sequence[BufferSpec]) -> list[Buffer]:
    """Declare a workflow's buffers and triggers: all of them, or none."""
    return [_create(job, spec, index) for index, spec in enumerate(specs)]


def buffer_delete(*, buffer: Buffer) -> None:
    """Forget a definition and its triggers (the buffer service's data is the service's)."""
    buffer.delete()


def _count(stats: Mapping[str, Any], name: str) -> int:
    value = stats.get(name, 0)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _seconds(report: Mapping[str, Any], name: str) -> float | None:
    value = report.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _actor_states(buffer: Buffer, stats: Mapping[str, Any]) -> list[BufferActorState]:
    """The actors' reports among a buffer's stats, as rows (one the service would not have
    kept, say from an older service, is skipped rather than guessed at)."""
    reports = stats.get("actor_states")
    rows = []
    for report in reports if isinstance(reports, list) else ():
        if not isinstance(report, dict) or report.get("state") not in ActorStateKind.values:
            continue
        workflow, actor = report.get("workflow"), report.get("actor")
        reported = _seconds(report, "reported_at")
        if not isinstance(workflow, str) or not isinstance(actor, str) or reported is None:
            continue
        rows.append(
            BufferActorState(
                buffer=buffer,
                workflow=workflow[:200],
                actor=actor[:200],
                state=report["state"],
                reported_at=dt.datetime.fromtimestamp(reported, tz=dt.UTC),
                **{name: _count(report, name) for name in ACTOR_COUNTS},
                **{name: _seconds(report, name) for name in ACTOR_SECONDS},
            )
        )
    return rows


def buffer_snapshots_record(*, now: dt.datetime) -> int:
    """Ask the buffer service for every defined buffer's stats and keep them as snapshots, and
    each workflow actor's latest report (``BufferActorState``, overwritten in place).

    A buffer the service does not serve is skipped; a service that cannot be reached ends the
    round (the next one tries again) rather than waiting out its timeout once per buffer.
    Returns the number of snapshots written.
    """
    snapshots = []
    actor_states: list[BufferActorState] = []
    for buffer in Buffer.objects.order_by("id"):
        try:
            stats = buffer_stats(buffer=buffer)
        except BufferServiceRefused:
            continue
        except BufferServiceUnavailable as error:
            logger.warning("buffer snapshots: %s", error)
            break
        firings = stats.get("firings")
        snapshots.append(
            BufferSnapshot(
                buffer=buffer,
                taken_at=now,
                samples=_count(stats, "samples"),
                firings=firings if isinstance(firings, dict) else {},
                **{name: _count(stats, name) for name in COUNTERS},
            )
        )
        actor_states += _actor_states(buffer, stats)
    BufferSnapshot.objects.bulk_create(snapshots)
    if actor_states:
        BufferActorState.objects.bulk_create(
            actor_states,
            update_conflicts=True,
            unique_fields=["buffer", "workflow", "actor"],
            update_fields=["state", "reported_at", *ACTOR_COUNTS, *ACTOR_SECONDS],
        )
    return len(snapshots)


def buffer_snapshots_prune(*, older_than: dt.datetime) -> int:
    """Drop snapshots taken before ``older_than``, and actors last reported before it (their
    workflow ended); returns the rows deleted."""
    deleted, _ = BufferSnapshot.objects.filter(taken_at__lt=older_than).delete()
    gone, _ = BufferActorState.objects.filter(reported_at__lt=older_than).delete()
    return deleted + gone
