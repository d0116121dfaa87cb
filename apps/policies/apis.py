"""Policy endpoints (staff): CRUD with a version history (who changed what, when)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.jobs.access import IsStaffPrincipal, acting_user
from apps.policies import services
from apps.policies.models import Policy, PolicyKind, PolicyVersion
from apps.policies.validation import PolicyInvalid
from apps.resources.models import ResourcePool
from controlplane.api.errors import Conflict
from controlplane.api.fields import INT32_MAX
from controlplane.api.pagination import IdCursorPagination


class PolicyOutputSerializer(serializers.ModelSerializer):
    pool: serializers.SlugRelatedField[ResourcePool] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    updated_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = Policy
        fields = [
            "id",
            "name",
            "kind",
            "pool",
            "settings",
            "version",
            "updated_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class PolicyVersionSerializer(serializers.ModelSerializer):
    author: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = PolicyVersion
        fields = ["version", "settings", "diff", "author", "comment", "created_at"]
        read_only_fields = fields


def _object(value: Any) -> None:
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be a JSON object")


class PolicyCreateSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=100)
    kind = serializers.ChoiceField(choices=PolicyKind.choices)
    pool = serializers.SlugRelatedField(
        slug_field="name", queryset=ResourcePool.objects.all(), required=False, allow_null=True
    )
    settings = serializers.JSONField(validators=[_object])
    comment = serializers.CharField(required=False, allow_blank=True, max_length=500)


class PolicyUpdateSerializer(serializers.Serializer):
    settings = serializers.JSONField(validators=[_object])
    expected_version = serializers.IntegerField(
        required=False, min_value=1, max_value=INT32_MAX, help_text="409 if the policy moved on"
    )
    comment = serializers.CharField(required=False, allow_blank=True, max_length=500)


def _invalid(error: PolicyInvalid) -> serializers.ValidationError:
    """400 naming each field (``settings.min_dop``) and the reason, in Loom's error shape."""
    detail: dict[str, Any] = {}
    for problem in error.errors:
        path = problem["field"].split(".")
        node = detail
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node.setdefault(path[-1], []).append(problem["reason"])
    return serializers.ValidationError(detail)


class PolicyViewSet(viewsets.GenericViewSet):
    queryset = Policy.objects.select_related("pool", "updated_by")
    serializer_class = PolicyOutputSerializer
    permission_classes = [IsStaffPrincipal]
    pagination_class = IdCursorPagination
    lookup_value_regex = "[0-9]+"

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(PolicyOutputSerializer(page, many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(PolicyOutputSerializer(self.get_object()).data)

    @extend_schema(request=PolicyCreateSerializer, responses={201: PolicyOutputSerializer})
    def create(self, request: Request) -> Response:
        serializer = PolicyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if Policy.objects.filter(name=data["name"]).exists():
            raise Conflict(field="name", reason=f"a policy named {data['name']!r} already exists")
        try:
            policy = services.policy_create(author=acting_user(request), **data)
        except PolicyInvalid as error:
            raise _invalid(error) from None
        return Response(PolicyOutputSerializer(policy).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=PolicyUpdateSerializer, responses=PolicyOutputSerializer)
    def partial_update(self, request: Request, pk: str) -> Response:
        policy = self.get_object()
        serializer = PolicyUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            policy = services.policy_update(
                policy_id=policy.pk, author=acting_user(request), **serializer.validated_data
            )
        except services.PolicyVersionConflict as error:
            raise Conflict(
                field="expected_version", reason=f"the policy is at version {error.current}"
            ) from None
        except PolicyInvalid as error:
            raise _invalid(error) from None
        return Response(PolicyOutputSerializer(policy).data)

    def destroy(self, request: Request, pk: str) -> Response:
        self.get_object().delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=PolicyVersionSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def versions(self, request: Request, pk: str) -> Response:
        policy = self.get_object()
        versions = policy.versions.select_related("author").order_by("-version")
        return Response(PolicyVersionSerializer(versions, many=True).data)
