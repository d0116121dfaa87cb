"""Input parsing for action submission, shared by the single and the batch endpoint.

Validation is all-or-nothing: every item is checked, and the errors of all items come back at
once, indexed (``items[17].demand.cpu.min``).
"""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import urlsplit

from rest_framework import serializers

from apps.actions.selectors import SubmitCatalog
from apps.actions.service_checks import check_service_action, service_default_demand
from apps.actions.services import ActionSpec
from apps.core.demand import DemandError, parse_demand
from apps.resources.models import PoolKind
from apps.trajectories.models import Trajectory
from controlplane.api.fields import INT64_MAX, FiniteFloatField

MAX_DURATION_S = 10_000_000.0
MAX_PRIORITY = 2**31 - 1


def _positive_duration(value: float) -> None:
    if not 0 < value <= MAX_DURATION_S:
        raise serializers.ValidationError(f"must be in (0, {MAX_DURATION_S:g}] seconds")


class ActionItemSerializer(serializers.Serializer):
    """One action: what to run (tool, service or command) and its resource demand."""

    tool = serializers.SlugField(
        required=False, allow_null=True, max_length=100, help_text="a registered tool's name"
    )
    service = serializers.SlugField(
        required=False, allow_null=True, max_length=100, help_text="a registered service's name"
    )
    pool = serializers.SlugField(
        required=False,
        allow_null=True,
        max_length=100,
        help_text="resource pool; default: the tool's or service's, else by key resource",
    )
    trajectory = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=INT64_MAX
    )
    command = serializers.CharField(
        required=False, allow_blank=True, max_length=100_000, trim_whitespace=False
    )
    payload = serializers.JSONField(required=False, allow_null=True)
    request = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='a service action\'s input, e.g. {"input_ids": [[1, 2, 3]]}',
    )
    priority = serializers.IntegerField(
        required=False,
        min_value=-MAX_PRIORITY,
        max_value=MAX_PRIORITY,
        help_text="forwarded to the service; higher runs first",
    )
    demand = serializers.JSONField(
        required=False,
        help_text=(
            'per resource {"min": a, "max": b}, {"units": [1, 2, 4, 8]} or an integer; '
            "resources: cpu, memory_mb, gpu, gpu_memory_mb, api:<quota>. "
            "Default: the tool's resource template."
        ),
    )
    elasticity = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='{"resource": "cpu", "efficiency": [E(1), E(2), ...]} with E(m) in (0, 1]',
    )
    single_unit_duration_s = FiniteFloatField(
        required=False, allow_null=True, validators=[_positive_duration]
    )
    timeout_s = FiniteFloatField(required=False, allow_null=True, validators=[_positive_duration])
    idempotency_key = serializers.CharField(
        required=False, allow_null=True, min_length=1, max_length=200
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # DRF deep-copies every declared field per instance, which costs more than validating a
        # single action. These are leaf fields that keep no per-request state: a shallow copy
        # each (bound to this instance by DRF) is enough.
        return {name: copy.copy(field) for name, field in self._declared_fields.items()}

    def validate(self, attrs: dict[str, Any]) -> ActionSpec:
        catalog: SubmitCatalog = self.context["catalog"]
        errors: dict[str, list[str]] = {}
        tool = service = pool = None
        if attrs.get("tool") is not None:
            tool = catalog.tools.get(attrs["tool"])
            if tool is None:
                errors["tool"] = [f"unknown tool {attrs['tool']!r}"]
        if attrs.get("service") is not None:
            service = catalog.services.get(attrs["service"])
            if service is None:
                errors["service"] = [f"unknown service {attrs['service']!r}"]
        if tool is not None and service is not None:
            errors["service"] = ["give a tool or a service, not both"]
        if attrs.get("request") is not None and attrs.get("service") is None:
            errors["request"] = ["only an action naming a service takes a request"]
        if attrs.get("pool") is not None:
            pool = catalog.pools.get(attrs["pool"])
            if pool is None:
                errors["pool"] = [f"unknown resource pool {attrs['pool']!r}"]
        if errors:
            raise serializers.ValidationError(errors)

        demand_json = attrs.get("demand")
        elasticity_json = attrs.get("elasticity")
        if demand_json is None and tool is not None:
            demand_json = tool.resource_template
            if "elasticity" not in attrs:
                elasticity_json = tool.elasticity
        elif demand_json is None and service is not None:
            demand_json, service_elasticity = service_default_demand(service)
            if "elasticity" not in attrs:
                elasticity_json = service_elasticity
        if demand_json is None:
            raise serializers.ValidationError({"demand": ["this field is required"]})
        try:
            demand = parse_demand(demand_json, elasticity_json, api_quotas=catalog.api_quotas)
        except DemandError as error:
            raise serializers.ValidationError(error.detail) from None

        if pool is not None:
            pool_id: int | None = pool.pk
        elif tool is not None and tool.pool_id is not None:
            pool_id = tool.pool_id
        elif service is not None and service.pool_id is not None:
            pool_id = service.pool_id
        else:
            pool_id = catalog.default_pool_id(demand.key_resource)
        payload = attrs.get("payload")
        if catalog.pool_kind(pool_id) == PoolKind.API:
            _check_api_request(payload)
        if service is not None:
            check_service_action(
                service=service,
                demand=demand,
                pool_kind=catalog.pool_kind(pool_id),
                request=attrs.get("request"),
            )
        timeout_s = attrs.get("timeout_s")
        if timeout_s is None and tool is not None:
            timeout_s = tool.timeout_s
        return ActionSpec(
            demand=demand,
            tool_id=tool.pk if tool is not None else None,
            service_id=service.pk if service is not None else None,
            trajectory_id=attrs.get("trajectory"),
            pool_id=pool_id,
            command=attrs.get("command", ""),
            payload=payload,
            request=attrs.get("request"),
            priority=attrs.get("priority", 0),
            single_unit_duration_s=attrs.get("single_unit_duration_s"),
            timeout_s=timeout_s,
            idempotency_key=attrs.get("idempotency_key"),
        )


API_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"})


def _check_api_request(payload: Any) -> None:
    """An action in an API pool is an HTTP call: ``payload.request`` says which (§5.1)."""
    request = payload.get("request") if isinstance(payload, dict) else None
    if not isinstance(request, dict):
        raise serializers.ValidationError(
            {"payload": {"request": ["an action in an API pool needs {method, url, ...}"]}}
        )
    errors: dict[str, list[str]] = {}
    url = request.get("url")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        errors["url"] = ["must be an http(s) URL"]
    method = request.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in API_METHODS:
        errors["method"] = [f"must be one of {', '.join(sorted(API_METHODS))}"]
    headers = request.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        errors["headers"] = ["must map header names to strings"]
    timeout = request.get("timeout_s", 30)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
        errors["timeout_s"] = ["must be a number of seconds in (0, 600]"]
    if errors:
        raise serializers.ValidationError({"payload": {"request": errors}})


def check_trajectories(*, job_id: int, specs: list[ActionSpec], field: str | None) -> None:
    """Every referenced trajectory must belong to the job; raise indexed errors otherwise."""
    wanted = {spec.trajectory_id for spec in specs if spec.trajectory_id is not None}
    if not wanted:
        return
    known = set(
        Trajectory.objects.filter(job_id=job_id, pk__in=wanted).values_list("pk", flat=True)
    )
    errors: dict[str, Any] = {}
    for index, spec in enumerate(specs):
        if spec.trajectory_id is not None and spec.trajectory_id not in known:
            reason = [f"no trajectory {spec.trajectory_id} in job {job_id}"]
            errors[f"[{index}]"] = {"trajectory": reason}
    if errors:
        if field is None:
            raise serializers.ValidationError(next(iter(errors.values())))
        raise serializers.ValidationError({field: errors})
