"""Job and API-key endpoints: parse, check permission, call one service (STYLE.md §1–2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.demand import RESOURCES
from apps.jobs import selectors, services
from apps.jobs.access import IsStaffPrincipal, acting_user, principal_of
from apps.jobs.models import ApiKey, Job, JobStatus
from controlplane.api.errors import ApiError, Conflict
from controlplane.api.fields import INT32_MAX
from controlplane.api.views import CursorListView


def validate_resource_quota(value: Any) -> None:
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be an object {resource: units}")
    errors: dict[str, list[str]] = {}
    for name, units in value.items():
        if name not in RESOURCES and not name.startswith("api:"):
            errors[name] = [f"unknown resource; known: {', '.join(RESOURCES)}, api:<quota>"]
        elif not isinstance(units, int) or isinstance(units, bool):
            errors[name] = ["must be an integer"]
        elif not 0 <= units <= INT32_MAX:
            errors[name] = [f"must be in 0..{INT32_MAX}, got {units}"]
    if errors:
        raise serializers.ValidationError(errors)


def validate_object(value: Any) -> None:
    if not isinstance(value, dict):
        raise serializers.ValidationError("must be a JSON object")


class JobOutputSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.get_username", read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "description",
            "owner",
            "status",
            "resource_quota",
            "policy_overrides",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class ApiKeyOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = ["id", "name", "job", "prefix", "created_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class JobListCreateApi(CursorListView):
    """GET: the jobs this key or user can see. POST (staff): create a job and its first key."""

    serializer_class = JobOutputSerializer

    class InputSerializer(serializers.Serializer):
        name = serializers.SlugField(max_length=100)
        description = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
        resource_quota = serializers.JSONField(required=False, validators=[validate_resource_quota])
        policy_overrides = serializers.JSONField(required=False, validators=[validate_object])

    class CreatedSerializer(JobOutputSerializer):
        api_key = serializers.CharField(help_text="the raw key: shown once, store it now")

        class Meta(JobOutputSerializer.Meta):
            fields = [*JobOutputSerializer.Meta.fields, "api_key"]

    def get_queryset(self) -> Any:
        return selectors.job_list(principal=principal_of(self.request))

    def get_permissions(self) -> Sequence[Any]:
        if self.request.method == "POST":
            return [*super().get_permissions(), IsStaffPrincipal()]
        return super().get_permissions()

    @extend_schema(request=InputSerializer, responses={201: CreatedSerializer})
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if Job.objects.filter(name=data["name"]).exists():
            raise Conflict(field="name", reason=f"a job named {data['name']!r} already exists")
        try:
            job, raw_key = services.job_create(owner=acting_user(request), **data)
        except IntegrityError:
            raise Conflict(field="name", reason="a job with this name already exists") from None
        body = dict(JobOutputSerializer(job).data, api_key=raw_key)
        return Response(body, status=status.HTTP_201_CREATED)


class JobDetailApi(APIView):
    """GET a job; PATCH its policy overrides and description (staff also status and quota)."""

    class InputSerializer(serializers.Serializer):
        description = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
        policy_overrides = serializers.JSONField(required=False, validators=[validate_object])
        status = serializers.ChoiceField(choices=JobStatus.choices, required=False)
        resource_quota = serializers.JSONField(required=False, validators=[validate_resource_quota])

    STAFF_ONLY_FIELDS = ("status", "resource_quota")

    @extend_schema(responses=JobOutputSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        job = selectors.job_get(principal=principal_of(request), job_id=job_id)
        return Response(JobOutputSerializer(job).data)

    @extend_schema(request=InputSerializer, responses=JobOutputSerializer)
    def patch(self, request: Request, job_id: int) -> Response:
        principal = principal_of(request)
        job = selectors.job_get(principal=principal, job_id=job_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        for field in self.STAFF_ONLY_FIELDS:
            if field in serializer.validated_data and not principal.is_staff:
                raise ApiError(field=field, reason="only staff may change this", status_code=403)
        job = services.job_update(job=job, **serializer.validated_data)
        return Response(JobOutputSerializer(job).data)


class JobKeysApi(APIView):
    """GET: the job's keys (prefixes only). POST (staff): a new key, its raw value shown once."""

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(required=False, allow_blank=True, max_length=100)

    class CreatedSerializer(ApiKeyOutputSerializer):
        api_key = serializers.CharField(help_text="the raw key: shown once, store it now")

        class Meta(ApiKeyOutputSerializer.Meta):
            fields = [*ApiKeyOutputSerializer.Meta.fields, "api_key"]

    def get_permissions(self) -> Sequence[Any]:
        if self.request.method == "POST":
            return [*super().get_permissions(), IsStaffPrincipal()]
        return super().get_permissions()

    @extend_schema(responses=ApiKeyOutputSerializer(many=True))
    def get(self, request: Request, job_id: int) -> Response:
        job = selectors.job_get(principal=principal_of(request), job_id=job_id)
        keys = selectors.api_key_list(job=job)
        return Response(ApiKeyOutputSerializer(keys, many=True).data)

    @extend_schema(request=InputSerializer, responses={201: CreatedSerializer})
    def post(self, request: Request, job_id: int) -> Response:
        job = selectors.job_get(principal=principal_of(request), job_id=job_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key, raw_key = services.api_key_create(
            job=job, name=serializer.validated_data.get("name", ""), created_by=acting_user(request)
        )
        body = dict(ApiKeyOutputSerializer(key).data, api_key=raw_key)
        return Response(body, status=status.HTTP_201_CREATED)


class JobKeyRevokeApi(APIView):
    """POST (staff): revoke one of a job's keys; 409 if it was already revoked."""

    permission_classes = [IsStaffPrincipal]

    @extend_schema(request=None, responses=ApiKeyOutputSerializer)
    def post(self, request: Request, job_id: int, key_id: int) -> Response:
        job = selectors.job_get(principal=principal_of(request), job_id=job_id)
        key = selectors.api_key_get(job=job, key_id=key_id)
        if not services.api_key_revoke(api_key=key):
            raise Conflict(field="key_id", reason=f"key {key.prefix}… is already revoked")
        return Response(ApiKeyOutputSerializer(key).data)
