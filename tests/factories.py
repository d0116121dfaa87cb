"""factory_boy factories for every Loom model (STYLE.md §6)."""

from __future__ import annotations

import factory
from django.contrib.auth.models import User
from django.utils import timezone

from apps.actions.models import Action, ActionStatus
from apps.buffers.models import Buffer, Trigger, TriggerKind
from apps.jobs.models import ApiKey, Job
from apps.jobs.services import api_key_create
from apps.policies.models import Policy, PolicyKind
from apps.resources.models import ApiQuota, Node, PoolKind, ResourcePool, Service, Tool
from apps.trajectories.models import Trajectory


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw")


class StaffFactory(UserFactory):  # builds a User
    is_staff = True
    is_superuser = True


class JobFactory(factory.django.DjangoModelFactory[Job]):
    class Meta:
        model = Job

    name = factory.Sequence(lambda n: f"job-{n}")
    owner = factory.SubFactory(UserFactory)


def make_key(*, job: Job | None = None, user: User | None = None) -> tuple[ApiKey, str]:
    """An API key and its raw value (keys are hashed, so factories go through the service)."""
    return api_key_create(job=job, user=user, name="test")


class PoolFactory(factory.django.DjangoModelFactory[ResourcePool]):
    class Meta:
        model = ResourcePool
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"pool-{n}")
    kind = PoolKind.CPU


class ToolFactory(factory.django.DjangoModelFactory[Tool]):
    class Meta:
        model = Tool
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"tool-{n}")
    pool = factory.SubFactory(PoolFactory)
    command_template = "run --threads {dop}"
    resource_template = factory.LazyFunction(lambda: {"cpu": {"min": 1, "max": 4}})
    timeout_s = 60.0


class ServiceFactory(factory.django.DjangoModelFactory[Service]):
    class Meta:
        model = Service

    name = factory.Sequence(lambda n: f"service-{n}")
    backend = "torch"
    model = "tiny-reward"
    allowed_dop = factory.LazyFunction(lambda: [1, 2])


class ApiQuotaFactory(factory.django.DjangoModelFactory[ApiQuota]):
    class Meta:
        model = ApiQuota

    name = factory.Sequence(lambda n: f"api-{n}")
    concurrency_limit = 4


class NodeFactory(factory.django.DjangoModelFactory[Node]):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node-{n}")
    pool = factory.SubFactory(PoolFactory)
    cores = 4
    memory_mb = 8192
    capacity = factory.LazyFunction(
        lambda: {"cores": 4, "numa": [[0, 1, 2, 3]], "memory_mb": 8192, "gpus": []}
    )


class TrajectoryFactory(factory.django.DjangoModelFactory[Trajectory]):
    class Meta:
        model = Trajectory

    job = factory.SubFactory(JobFactory)
    prompt_id = factory.Sequence(lambda n: f"prompt-{n}")


class ActionFactory(factory.django.DjangoModelFactory[Action]):
    class Meta:
        model = Action

    job = factory.SubFactory(JobFactory)
    demand = factory.LazyFunction(lambda: {"cpu": {"min": 1, "max": 4}})
    key_resource = "cpu"
    min_units = 1
    max_units = 4
    status = ActionStatus.QUEUED
    submitted_at = factory.LazyFunction(timezone.now)


class PolicyFactory(factory.django.DjangoModelFactory[Policy]):
    class Meta:
        model = Policy

    name = factory.Sequence(lambda n: f"policy-{n}")
    kind = PolicyKind.ACTION_SCHEDULER
    settings = factory.LazyFunction(lambda: {"depth": 2})


class BufferFactory(factory.django.DjangoModelFactory[Buffer]):
    class Meta:
        model = Buffer

    job = factory.SubFactory(JobFactory)
    name = factory.Sequence(lambda n: f"buffer-{n}")
    capacity = 1024


class TriggerFactory(factory.django.DjangoModelFactory[Trigger]):
    class Meta:
        model = Trigger

    buffer = factory.SubFactory(BufferFactory)
    name = factory.Sequence(lambda n: f"trigger-{n}")
    kind = TriggerKind.TIME
    params = factory.LazyFunction(lambda: {"period_s": 5})
