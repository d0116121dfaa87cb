"""Pools, nodes and the registries of services, tools and rate-limited APIs (DESIGN.md)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class PoolKind(models.TextChoices):
    CPU = "cpu", "CPU"
    GPU = "gpu", "GPU"
    API = "api", "external API"


class ResourcePool(models.Model):
    """A group of nodes of one resource type; one scheduler process runs per pool."""

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=8, choices=PoolKind.choices)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class NodeStatus(models.TextChoices):
    ONLINE = "online", "online"
    DRAINING = "draining", "draining"
    OFFLINE = "offline", "offline"


class Node(models.Model):
    """A machine running a node agent; capacity comes from the agent's registration.

    ``capacity`` keeps the full layout (NUMA nodes with their core ids, each GPU's memory); the
    scalar columns repeat its totals so the scheduler and the dashboard can filter and sum them.
    """

    name = models.CharField(max_length=200, unique=True)
    pool = models.ForeignKey(ResourcePool, on_delete=models.PROTECT, related_name="nodes")
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.ONLINE)
    address = models.CharField(max_length=255, blank=True, default="")
    agent_version = models.CharField(max_length=64, blank=True, default="")
    capacity = models.JSONField(default=dict)
    cores = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveBigIntegerField(default=0)
    gpus = models.PositiveIntegerField(default=0)
    gpu_memory_mb = models.PositiveBigIntegerField(default=0)
    usage = models.JSONField(default=dict, blank=True)
    token_prefix = models.CharField(max_length=12, blank=True, default="", editable=False)
    token_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    registered_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["pool", "status"], name="node_pool_status")]
        constraints = [
            models.CheckConstraint(name="node_cores_nonneg", condition=Q(cores__gte=0)),
            models.CheckConstraint(name="node_gpus_nonneg", condition=Q(gpus__gte=0)),
        ]

    def __str__(self) -> str:
        return self.name


class ServiceBackend(models.TextChoices):
    SGLANG = "sglang", "SGLang server"
    TORCH = "torch", "PyTorch module"


class ServiceTask(models.TextChoices):
    REWARD = "reward", "reward model (a score per sequence)"
    LOGPROBS = "logprobs", "teacher (per-token log-probabilities)"


class ElasticitySource(models.TextChoices):
    DECLARED = "declared", "declared"
    MEASURED = "measured", "measured"


def _single_gpu() -> list[int]:
    return [1]


class Service(models.Model):
    """A GPU service (reward model, LLM judge, teacher) the GPU manager caches and evicts
    (arl-tangram §5.3). Its rules (``apps.resources.service_rules``) hold for the REST API and
    the admin alike; actions naming it are checked against them at submission."""

    name = models.SlugField(max_length=100, unique=True)
    pool = models.ForeignKey(
        ResourcePool, null=True, blank=True, on_delete=models.SET_NULL, related_name="services"
    )
    backend = models.CharField(max_length=16, choices=ServiceBackend.choices)
    task = models.CharField(max_length=16, choices=ServiceTask.choices, default=ServiceTask.REWARD)
    model = models.CharField(max_length=255, help_text="model name or path the backend loads")
    allowed_dop = models.JSONField(
        default=_single_gpu, help_text="the chunk sizes it runs on: a subset of 1, 2, 4, 8 GPUs"
    )
    memory_mb = models.PositiveBigIntegerField(default=0, help_text="GPU memory per GPU (MB)")
    state_size_mb = models.PositiveBigIntegerField(default=0, help_text="state moved on eviction")
    throughput = models.JSONField(
        default=dict,
        blank=True,
        help_text='its elasticity: requests/s per chunk size, e.g. {"1": 4.0, "2": 7.5}',
    )
    elasticity_source = models.CharField(
        max_length=16, choices=ElasticitySource.choices, default=ElasticitySource.DECLARED
    )
    max_sequences = models.PositiveIntegerField(
        null=True, blank=True, help_text="most sequences one request may carry (null: no limit)"
    )
    max_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="most tokens one sequence may have (null: no limit)"
    )
    vocab_size = models.PositiveIntegerField(
        null=True, blank=True, help_text="token ids must be below it (null: not checked)"
    )
    predeploy = models.JSONField(
        default=dict,
        blank=True,
        help_text="pre-deployment hints: {replicas, chunk_size, nodes} to keep warm",
    )
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                name="service_limits_positive",
                condition=(Q(max_sequences__isnull=True) | Q(max_sequences__gte=1))
                & (Q(max_tokens__isnull=True) | Q(max_tokens__gte=1))
                & (Q(vocab_size__isnull=True) | Q(vocab_size__gte=1)),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Admin forms: the registry's rules, the same the REST API applies."""
        from django.core.exceptions import ValidationError

        from apps.resources.service_rules import service_errors

        errors = service_errors(
            {
                "allowed_dop": self.allowed_dop,
                "throughput": self.throughput,
                "predeploy": self.predeploy,
                "max_sequences": self.max_sequences,
                "max_tokens": self.max_tokens,
                "vocab_size": self.vocab_size,
            }
        )
        if errors:
            raise ValidationError(errors)


class Tool(models.Model):
    """A registered tool: a command template (``{dop}`` = allocated units) and its resources."""

    name = models.SlugField(max_length=100, unique=True)
    pool = models.ForeignKey(
        ResourcePool, null=True, blank=True, on_delete=models.SET_NULL, related_name="tools"
    )
    command_template = models.TextField(blank=True, default="")
    resource_template = models.JSONField(
        default=dict, blank=True, help_text="default demand for actions that give none"
    )
    elasticity = models.JSONField(null=True, blank=True, help_text="default elasticity profile")
    timeout_s = models.FloatField(default=600.0)
    idempotent = models.BooleanField(
        default=False, help_text="safe to run again after a lost agent (retried automatically)"
    )
    network = models.BooleanField(
        default=False,
        help_text="its actions may use the host's network (off: a sandbox with loopback only)",
    )
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(name="tool_timeout_positive", condition=Q(timeout_s__gt=0)),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Admin forms: the resource template and elasticity follow the demand rules."""
        from django.core.exceptions import ValidationError

        from apps.core.demand import DemandError, parse_demand

        if not self.resource_template:
            if self.elasticity is not None:
                raise ValidationError({"elasticity": "needs a resource template naming it"})
            return
        quotas = set(ApiQuota.objects.values_list("name", flat=True))
        try:
            parse_demand(self.resource_template, self.elasticity, api_quotas=quotas)
        except DemandError as error:
            field = "elasticity" if "elasticity" in error.detail else "resource_template"
            raise ValidationError({field: str(error.detail)}) from None


class ApiQuota(models.Model):
    """A rate-limited external API: demands name it as the resource ``api:<name>``."""

    name = models.SlugField(max_length=100, unique=True)
    pool = models.ForeignKey(
        ResourcePool, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_quotas"
    )
    concurrency_limit = models.PositiveIntegerField(default=1)
    quota_per_period = models.PositiveIntegerField(null=True, blank=True)
    period_s = models.PositiveIntegerField(null=True, blank=True)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "API quota"
        constraints = [
            models.CheckConstraint(
                name="apiquota_concurrency_positive", condition=Q(concurrency_limit__gte=1)
            ),
            models.CheckConstraint(
                name="apiquota_quota_and_period_together",
                condition=Q(quota_per_period__isnull=True, period_s__isnull=True)
                | Q(quota_per_period__isnull=False, period_s__gte=1),
            ),
        ]

    def __str__(self) -> str:
        return self.name
