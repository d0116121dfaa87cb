"""Node agent endpoints (register, heartbeat) and staff CRUD of pools, services, tools, quotas.

Node authentication: staff register a node (session or staff key) and receive a node token,
shown once; the agent sends it as ``Authorization: Bearer loomnode_…`` on every heartbeat
(staff may heartbeat too). A node token authenticates nothing else.

The registries are plain CRUD over one model each, so a ModelSerializer per model is the simpler
thing here (STYLE.md §2 allows it); validation the database cannot express lives in it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import ProtectedError
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.demand import DemandError, parse_demand
from apps.jobs.access import IsStaffOrReadOnly, IsStaffPrincipal, principal_of
from apps.jobs.authentication import (
    NODE_TOKEN_PREFIX,
    BearerKeyAuthentication,
    bearer_token,
    hash_key,
)
from apps.resources import services
from apps.resources.capacity import CapacitySerializer
from apps.resources.models import ApiQuota, Node, NodeStatus, ResourcePool, Service, Tool
from apps.resources.service_rules import MAX_REQUEST_LIMIT, efficiency_curve, service_errors
from controlplane.api.errors import Conflict
from controlplane.api.fields import FiniteFloatField
from controlplane.api.pagination import IdCursorPagination


class NodeTokenAuthentication(BearerKeyAuthentication):
    """Node tokens (``loomnode_…``) authenticate as the node; other bearer keys as usual."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        token = bearer_token(request)
        if token is None or not token.startswith(NODE_TOKEN_PREFIX):
            return super().authenticate(request)
        node = Node.objects.filter(token_hash=hash_key(token)).first()
        if node is None:
            raise exceptions.AuthenticationFailed("unknown node token")
        return AnonymousUser(), node


class IsThisNodeOrStaff(BasePermission):
    message = "only this node's token or staff may send its heartbeat"

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, Node):
            return request.auth.pk == view.kwargs.get("node_id")
        return principal_of(request).is_staff


class NodeOutputSerializer(serializers.ModelSerializer):
    pool: serializers.SlugRelatedField[ResourcePool] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "pool",
            "status",
            "address",
            "agent_version",
            "capacity",
            "cores",
            "memory_mb",
            "gpus",
            "gpu_memory_mb",
            "usage",
            "registered_at",
            "last_heartbeat_at",
        ]
        read_only_fields = fields


class NodeRegisterApi(APIView):
    """POST (staff): register or re-register a node agent; the node token is shown once."""

    permission_classes = [IsStaffPrincipal]

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=200)
        pool = serializers.SlugField(max_length=100)
        address = serializers.CharField(required=False, allow_blank=True, max_length=255)
        agent_version = serializers.CharField(required=False, allow_blank=True, max_length=64)
        capacity = CapacitySerializer()

        def validate_pool(self, value: str) -> ResourcePool:
            pool = ResourcePool.objects.filter(name=value).first()
            if pool is None:
                raise serializers.ValidationError(f"unknown resource pool {value!r}")
            return pool

    class RegisteredSerializer(NodeOutputSerializer):
        node_token = serializers.CharField(help_text="send as Bearer on heartbeats; shown once")

        class Meta(NodeOutputSerializer.Meta):
            fields = [*NodeOutputSerializer.Meta.fields, "node_token"]
            read_only_fields = fields

    @extend_schema(request=InputSerializer, responses={201: RegisteredSerializer})
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        node, token = services.node_register(**serializer.validated_data)
        body = dict(NodeOutputSerializer(node).data, node_token=token)
        return Response(body, status=status.HTTP_201_CREATED)


class NodeHeartbeatApi(APIView):
    """POST (the node's token, or staff): the node is alive; report its current usage."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsThisNodeOrStaff]

    class InputSerializer(serializers.Serializer):
        usage = serializers.JSONField(
            required=False, help_text="free-form utilisation, e.g. {cpu_busy: [..], gpu_mem: ..}"
        )
        status = serializers.ChoiceField(choices=NodeStatus.choices, required=False)

        def validate_usage(self, value: Any) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise serializers.ValidationError("must be a JSON object")
            return value

    @extend_schema(request=InputSerializer, responses=NodeOutputSerializer)
    def post(self, request: Request, node_id: int) -> Response:
        node = Node.objects.select_related("pool").filter(pk=node_id).first()
        if node is None:
            raise exceptions.NotFound(f"no node {node_id}")
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        node = services.node_heartbeat(
            node=node,
            usage=serializer.validated_data.get("usage", {}),
            status=serializer.validated_data.get("status"),
        )
        return Response(NodeOutputSerializer(node).data)


class ProtectedDeleteMixin:
    def perform_destroy(self, instance: Any) -> None:
        try:
            instance.delete()
        except ProtectedError as error:
            users = {type(obj)._meta.verbose_name_plural for obj in error.protected_objects}
            raise Conflict(
                field="id", reason=f"still referenced by {', '.join(sorted(map(str, users)))}"
            ) from None


class NodeViewSet(ProtectedDeleteMixin, viewsets.ReadOnlyModelViewSet):
    """Nodes, as registered by their agents (read-only; staff)."""

    queryset = Node.objects.select_related("pool")
    serializer_class = NodeOutputSerializer
    permission_classes = [IsStaffPrincipal]
    pagination_class = IdCursorPagination
    lookup_value_regex = "[0-9]+"


class ResourcePoolSerializer(serializers.ModelSerializer):
    class Meta:
        model = ResourcePool
        fields = ["id", "name", "kind", "description", "created_at", "updated_at"]


class ServiceSerializer(serializers.ModelSerializer):
    """A GPU service; its rules are ``apps.resources.service_rules``'s (the admin's too)."""

    pool: serializers.SlugRelatedField[ResourcePool] = serializers.SlugRelatedField(
        slug_field="name", queryset=ResourcePool.objects.all(), required=False, allow_null=True
    )
    allowed_dop = serializers.JSONField(
        required=False, help_text="the chunk sizes it runs on: a subset of 1, 2, 4, 8 GPUs"
    )
    throughput = serializers.JSONField(
        required=False, help_text='requests/s per chunk size, e.g. {"1": 4.0, "2": 7.5}'
    )
    predeploy = serializers.JSONField(
        required=False, help_text="hints: {replicas, chunk_size, nodes} to keep warm"
    )
    efficiency = serializers.SerializerMethodField(
        help_text="E(m) for m = 1..the largest chunk size, from the throughput (null without "
        "a throughput at 1 GPU)"
    )

    class Meta:
        model = Service
        fields = [
            "id",
            "name",
            "pool",
            "backend",
            "task",
            "model",
            "allowed_dop",
            "memory_mb",
            "state_size_mb",
            "throughput",
            "elasticity_source",
            "efficiency",
            "max_sequences",
            "max_tokens",
            "vocab_size",
            "predeploy",
            "description",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {
            "max_sequences": {"min_value": 1, "max_value": MAX_REQUEST_LIMIT},
            "max_tokens": {"min_value": 1, "max_value": MAX_REQUEST_LIMIT},
            "vocab_size": {"min_value": 1, "max_value": MAX_REQUEST_LIMIT},
        }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        merged = {
            name: attrs.get(name, getattr(self.instance, name, default))
            for name, default in SERVICE_RULE_DEFAULTS.items()
        }
        errors = service_errors(merged)
        if errors:
            raise serializers.ValidationError(errors)
        if "allowed_dop" in attrs:
            attrs["allowed_dop"] = sorted(attrs["allowed_dop"])
        if "throughput" in attrs:
            attrs["throughput"] = {
                str(int(size)): float(rate)
                for size, rate in sorted(attrs["throughput"].items(), key=lambda item: int(item[0]))
            }
        return attrs

    def get_efficiency(self, service: Service) -> list[float] | None:
        return efficiency_curve(service.throughput or {}, max(service.allowed_dop or [1]))


# A field the request leaves out is checked at its stored value, or at the model's default.
SERVICE_RULE_DEFAULTS: dict[str, Any] = {
    "allowed_dop": [1],
    "throughput": {},
    "predeploy": {},
    "max_sequences": None,
    "max_tokens": None,
    "vocab_size": None,
}


class ToolSerializer(serializers.ModelSerializer):
    pool: serializers.SlugRelatedField[ResourcePool] = serializers.SlugRelatedField(
        slug_field="name", queryset=ResourcePool.objects.all(), required=False, allow_null=True
    )
    resource_template = serializers.JSONField(required=False)
    elasticity = serializers.JSONField(required=False, allow_null=True)
    timeout_s = FiniteFloatField(required=False, min_value=0.001, max_value=10_000_000.0)

    class Meta:
        model = Tool
        fields = [
            "id",
            "name",
            "pool",
            "command_template",
            "resource_template",
            "elasticity",
            "timeout_s",
            "idempotent",
            "network",
            "description",
            "created_at",
            "updated_at",
        ]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        template = attrs.get("resource_template", getattr(self.instance, "resource_template", {}))
        elasticity = attrs.get("elasticity", getattr(self.instance, "elasticity", None))
        if template:
            quotas = set(ApiQuota.objects.values_list("name", flat=True))
            try:
                demand = parse_demand(template, elasticity, api_quotas=quotas)
            except DemandError as error:
                detail = dict(error.detail)
                if "demand" in detail:
                    detail["resource_template"] = detail.pop("demand")
                raise serializers.ValidationError(detail) from None
            attrs["resource_template"] = demand.as_json()
            attrs["elasticity"] = demand.elasticity
        elif elasticity is not None:
            raise serializers.ValidationError(
                {"elasticity": ["needs a resource_template naming its resource"]}
            )
        return attrs


class ApiQuotaSerializer(serializers.ModelSerializer):
    pool: serializers.SlugRelatedField[ResourcePool] = serializers.SlugRelatedField(
        slug_field="name", queryset=ResourcePool.objects.all(), required=False, allow_null=True
    )

    class Meta:
        model = ApiQuota
        fields = [
            "id",
            "name",
            "pool",
            "concurrency_limit",
            "quota_per_period",
            "period_s",
            "description",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {"concurrency_limit": {"min_value": 1}, "period_s": {"min_value": 1}}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        quota = attrs.get("quota_per_period", getattr(self.instance, "quota_per_period", None))
        period = attrs.get("period_s", getattr(self.instance, "period_s", None))
        if (quota is None) != (period is None):
            raise serializers.ValidationError(
                {"period_s": ["quota_per_period and period_s go together (both or neither)"]}
            )
        return attrs


class _StaffCrud(ProtectedDeleteMixin, viewsets.ModelViewSet):
    permission_classes = [IsStaffOrReadOnly]
    pagination_class = IdCursorPagination
    lookup_value_regex = "[0-9]+"
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]


class ResourcePoolViewSet(_StaffCrud):
    queryset = ResourcePool.objects.all()
    serializer_class = ResourcePoolSerializer


class ServiceViewSet(_StaffCrud):
    queryset = Service.objects.select_related("pool")
    serializer_class = ServiceSerializer


class ToolViewSet(_StaffCrud):
    queryset = Tool.objects.select_related("pool")
    serializer_class = ToolSerializer


class ApiQuotaViewSet(_StaffCrud):
    queryset = ApiQuota.objects.select_related("pool")
    serializer_class = ApiQuotaSerializer
