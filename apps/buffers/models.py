"""Buffer and trigger definitions (artos §4.1–§4.2). The definitions live here, in PostgreSQL;
the experience data itself lives in the buffer service (``workers.buffers``: shared memory and
ZeroMQ), never in the database."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from apps.buffers import rules
from apps.jobs.models import Job


def model_errors(errors: rules.Errors) -> dict[str, list[str]]:
    """The rules' dotted fields (``params.n``) under the model field a form shows (``params``),
    the rest of the path leading the message (``n: expected a positive integer``)."""
    out: dict[str, list[str]] = {}
    for field, reasons in errors.items():
        head, _, rest = field.partition(".")
        for reason in reasons:
            out.setdefault(head, []).append(f"{rest}: {reason}" if rest else reason)
    return out


class SamplerKind(models.TextChoices):
    FULL_BATCH = "full_batch", "full batch"
    FIFO_PER_ACTOR = "fifo_per_actor", "FIFO per actor"
    UNIFORM = "uniform", "uniform"
    PRIORITISED = "prioritised", "prioritised"
    N_STEP = "n_step", "n-step"


class SyncMode(models.TextChoices):
    ON_POLICY = "on_policy", "on-policy"
    OFF_POLICY = "off_policy", "off-policy"


class Eviction(models.TextChoices):
    FIFO = "fifo", "FIFO (overwrite the oldest)"
    RESERVOIR = "reservoir", "reservoir (uniform over everything written)"
    KEEP_UNSAMPLED = "keep_unsampled", "keep unsampled (refuse writes when full)"


class Buffer(models.Model):
    """One buffer of a job: its typed data keys, capacity, eviction, sampler and sync mode."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="buffers")
    name = models.SlugField(max_length=100)
    schema = models.JSONField(
        default=dict,
        help_text='data keys: {"obs": {"shape": [4], "dtype": "float32"}, '
        '"tokens": {"shape": [null], "dtype": "int32", "max_len": 512}}',
    )
    capacity = models.PositiveIntegerField(help_text="most steps held at once")
    eviction = models.CharField(
        max_length=16, choices=Eviction.choices, default=Eviction.KEEP_UNSAMPLED
    )
    sampler = models.CharField(
        max_length=32, choices=SamplerKind.choices, default=SamplerKind.FULL_BATCH
    )
    sync_mode = models.CharField(
        max_length=16, choices=SyncMode.choices, default=SyncMode.ON_POLICY
    )
    config = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["job", "name"]
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="buffer_unique_name_per_job"),
            models.CheckConstraint(name="buffer_capacity_positive", condition=Q(capacity__gte=1)),
            models.CheckConstraint(
                name="buffer_eviction_known", condition=Q(eviction__in=Eviction.values)
            ),
            models.CheckConstraint(
                name="buffer_on_policy_keeps_unsampled",
                condition=~Q(sync_mode=SyncMode.ON_POLICY) | Q(eviction=Eviction.KEEP_UNSAMPLED),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job.name}/{self.name}"

    @property
    def prioritised(self) -> bool:
        return self.sampler == SamplerKind.PRIORITISED

    @property
    def service_name(self) -> str:
        """The buffer's name in the buffer service, which serves every job's buffers: the job's
        id keeps two jobs' ``rollout`` buffers apart."""
        return f"{self.job_id}.{self.name}"

    def clean(self) -> None:
        """The admin's check: the rules the API applies (``apps.buffers.rules``)."""
        values: dict[str, Any] = {
            "schema": self.schema,
            "capacity": self.capacity,
            "eviction": self.eviction,
            "sync_mode": self.sync_mode,
        }
        if errors := rules.buffer_errors(values):
            raise ValidationError(model_errors(errors))


class TriggerKind(models.TextChoices):
    DATA_KEY = "data_key", "DataKeyTrigger(n, size, keys)"
    OBJECT_KEY = "object_key", "ObjectKeyTrigger(key)"
    TIME = "time", "TimeTrigger(period)"
    TRANSFER = "transfer", "TransferTrigger(keys)"


class Trigger(models.Model):
    """A trigger bound to a buffer, checked whenever the buffer's data changes (artos §4.1)."""

    buffer = models.ForeignKey(Buffer, on_delete=models.CASCADE, related_name="triggers")
    name = models.SlugField(max_length=100)
    kind = models.CharField(max_length=16, choices=TriggerKind.choices)
    # data_key: {"n": 8, "size": 1024, "keys": [...]}; object_key: {"key": ...};
    # time: {"period_s": 5}; transfer: {"keys": [[...], ...], "size": 128}
    params = models.JSONField(default=dict)
    target = models.CharField(
        max_length=300,
        blank=True,
        default="",
        help_text="where firings go: blank (counted in stats), @actors (invoke the workflow's "
        "actors) or a tcp:// / ipc:// address",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["buffer", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["buffer", "name"], name="trigger_unique_name_per_buffer"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.buffer}:{self.name}"

    def clean(self) -> None:
        """The admin's check: the rules the API applies, against the buffer's schema."""
        schema = None
        has_buffer = self.buffer_id is not None or Trigger.buffer.is_cached(self)
        if has_buffer and not rules.schema_errors(self.buffer.schema):
            schema = self.buffer.schema
        if errors := rules.trigger_errors(self.kind, self.params, self.target, schema):
            raise ValidationError(model_errors(errors))


class BufferSnapshot(models.Model):
    """A buffer's fill level, counters and trigger firings at one moment, as the buffer service
    reported them (``apps.buffers.tasks``): what a per-buffer dashboard plots over time."""

    buffer = models.ForeignKey(Buffer, on_delete=models.CASCADE, related_name="snapshots")
    taken_at = models.DateTimeField()
    held = models.PositiveIntegerField(help_text="steps held")
    complete = models.PositiveIntegerField(help_text="steps with every key written")
    actors = models.PositiveIntegerField(help_text="actors that have written")
    steps_written = models.BigIntegerField(default=0)
    steps_dropped = models.BigIntegerField(default=0)
    steps_evicted = models.BigIntegerField(default=0)
    samples = models.BigIntegerField(default=0)
    firings = models.JSONField(default=dict, help_text="trigger name → firings so far")

    class Meta:
        ordering = ["-taken_at"]
        indexes = [models.Index(fields=["buffer", "-taken_at"], name="buffer_snapshot_recent")]

    def __str__(self) -> str:
        return f"{self.buffer} @ {self.taken_at:%Y-%m-%d %H:%M:%S}"

    @property
    def fill(self) -> float:
        return self.held / self.buffer.capacity if self.buffer.capacity else 0.0


class ActorStateKind(models.TextChoices):
    CHECKPOINTED = "checkpointed", "checkpointed"
    PREWARMING = "prewarming", "pre-warming"
    PREWARMED = "prewarmed", "pre-warmed"
    RUNNING = "running", "running"
    FAILED = "failed", "failed"


class BufferActorState(models.Model):
    """An elastic actor's latest state and start-up latencies (artos §4.3), as its workflow
    reported them to the buffer service (``report_actors``) and the snapshot recorder copied
    them: one row per buffer, workflow and actor, overwritten by each newer report."""

    buffer = models.ForeignKey(Buffer, on_delete=models.CASCADE, related_name="actor_states")
    workflow = models.CharField(max_length=200)
    actor = models.CharField(max_length=200)
    state = models.CharField(max_length=16, choices=ActorStateKind.choices)
    invocations = models.PositiveIntegerField(default=0, help_text="invocations finished")
    restored = models.PositiveIntegerField(default=0, help_text="starts from its checkpoint")
    cold = models.PositiveIntegerField(default=0, help_text="starts with no checkpoint")
    last_startup_wait_s = models.FloatField(null=True, blank=True)
    last_restore_s = models.FloatField(null=True, blank=True)
    startup_wait_p50_s = models.FloatField(null=True, blank=True)
    startup_wait_p99_s = models.FloatField(null=True, blank=True)
    reported_at = models.DateTimeField(help_text="when the workflow last reported this actor")

    class Meta:
        ordering = ["buffer", "workflow", "actor"]
        constraints = [
            models.UniqueConstraint(
                fields=["buffer", "workflow", "actor"], name="buffer_actor_state_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.buffer} {self.workflow}/{self.actor}: {self.state}"
