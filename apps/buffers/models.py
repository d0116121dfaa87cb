"""Buffer and trigger definitions (artos §4); buffer data lives in Redis / shared memory."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from apps.jobs.models import Job


class SamplerKind(models.TextChoices):
    FULL_BATCH = "full_batch", "full batch"
    FIFO_PER_ACTOR = "fifo_per_actor", "FIFO per actor"
    UNIFORM = "uniform", "uniform"
    PRIORITISED = "prioritised", "prioritised"
    N_STEP = "n_step", "n-step"


class SyncMode(models.TextChoices):
    ON_POLICY = "on_policy", "on-policy"
    OFF_POLICY = "off_policy", "off-policy"


class Buffer(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="buffers")
    name = models.SlugField(max_length=100)
    capacity = models.PositiveIntegerField(help_text="most items held at once")
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
        ]

    def __str__(self) -> str:
        return f"{self.job.name}/{self.name}"


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
    # time: {"period_s": 5}; transfer: {"keys": [...]}
    params = models.JSONField(default=dict)
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
