"""Action endpoints: submit (one or a batch), list, retrieve, cancel, await the result."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.actions import selectors, services
from apps.actions.models import TERMINAL_STATUSES, Action, ActionStatus
from apps.actions.notify import get_notifier
from apps.actions.serializers import ActionItemSerializer, check_trajectories
from apps.actions.services import ActionSpec
from apps.jobs.access import Principal, principal_of
from apps.jobs.models import Job
from apps.jobs.selectors import job_list
from apps.resources.models import Node, ResourcePool, Service, Tool
from controlplane.api.errors import ApiError, Conflict
from controlplane.api.fields import INT64_MAX, FiniteFloatField
from controlplane.api.views import CursorListView


class ActionOutputSerializer(serializers.ModelSerializer):
    tool: serializers.SlugRelatedField[Tool] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    service: serializers.SlugRelatedField[Service] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    pool: serializers.SlugRelatedField[ResourcePool] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    node: serializers.SlugRelatedField[Node] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    act_s = serializers.SerializerMethodField(
        help_text="action completion time: finished_at − submitted_at (null while active)"
    )

    class Meta:
        model = Action
        fields = [
            "id",
            "job",
            "trajectory",
            "tool",
            "service",
            "pool",
            "command",
            "payload",
            "demand",
            "elasticity",
            "key_resource",
            "min_units",
            "max_units",
            "single_unit_duration_s",
            "timeout_s",
            "status",
            "allocation",
            "node",
            "attempts",
            "submitted_at",
            "scheduled_at",
            "started_at",
            "finished_at",
            "act_s",
            "exit_code",
            "output",
            "score",
            "error_reason",
            "idempotency_key",
        ]
        read_only_fields = fields

    def get_act_s(self, action: Action) -> float | None:
        if action.finished_at is None:
            return None
        return (action.finished_at - action.submitted_at).total_seconds()


class ActionResultSerializer(ActionOutputSerializer):
    class Meta(ActionOutputSerializer.Meta):
        fields = [
            "id",
            "status",
            "exit_code",
            "output",
            "score",
            "error_reason",
            "allocation",
            "attempts",
            "submitted_at",
            "scheduled_at",
            "started_at",
            "finished_at",
            "act_s",
        ]
        read_only_fields = fields


def resolve_job(principal: Principal, job_id: int | None) -> Job:
    """The job to submit into: a job key's own job, or the ``job`` a staff caller names."""
    if principal.job_id is not None:
        if job_id is not None and job_id != principal.job_id:
            raise ApiError(field="job", reason=f"no job {job_id} visible to this key")
        job_id = principal.job_id
    if job_id is None:
        raise ApiError(field="job", reason="this field is required (staff submit into a job)")
    job = job_list(principal=principal).filter(pk=job_id).first()
    if job is None:
        raise ApiError(field="job", reason=f"no job {job_id} visible to this key")
    if job.status != "active":
        raise Conflict(field="job", reason=f"job {job.name!r} is {job.status}, not active")
    return job


def _catalog_context() -> dict[str, Any]:
    return {"catalog": selectors.submit_catalog()}


class ActionListSubmitApi(CursorListView):
    """GET: actions, newest first, filtered. POST: submit one action (idempotency key honoured)."""

    serializer_class = ActionOutputSerializer

    class FilterSerializer(serializers.Serializer):
        status = serializers.CharField(
            required=False, help_text="comma-separated statuses, e.g. queued,running"
        )
        job = serializers.IntegerField(required=False, min_value=1, max_value=INT64_MAX)
        trajectory = serializers.IntegerField(required=False, min_value=1, max_value=INT64_MAX)
        tool = serializers.SlugField(required=False, max_length=100)
        submitted_after = serializers.DateTimeField(required=False)
        submitted_before = serializers.DateTimeField(required=False)

        def validate_status(self, value: str) -> list[str]:
            statuses = [part.strip() for part in value.split(",") if part.strip()]
            unknown = [part for part in statuses if part not in ActionStatus.values]
            if unknown or not statuses:
                raise serializers.ValidationError(
                    f"unknown status {unknown[0] if unknown else value!r}; "
                    f"one of {', '.join(ActionStatus.values)}"
                )
            return statuses

    class InputSerializer(ActionItemSerializer):
        job = serializers.IntegerField(
            required=False, min_value=1, max_value=INT64_MAX, help_text="staff only; job keys omit"
        )

        def validate(self, attrs: dict[str, Any]) -> ActionSpec:
            # The spec has no job; keep the one named here for resolve_job().
            self.job_id: int | None = attrs.pop("job", None)
            return super().validate(attrs)

    class SubmittedSerializer(ActionOutputSerializer):
        class Meta(ActionOutputSerializer.Meta):
            pass

    def get_queryset(self) -> Any:
        filters = self.filters()
        return selectors.action_list(
            principal=principal_of(self.request),
            job_id=filters.get("job"),
            statuses=filters.get("status"),
            trajectory_id=filters.get("trajectory"),
            tool_name=filters.get("tool"),
            submitted_after=filters.get("submitted_after"),
            submitted_before=filters.get("submitted_before"),
        )

    @extend_schema(parameters=[FilterSerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=InputSerializer,
        responses={
            201: ActionOutputSerializer,
            200: OpenApiResponse(ActionOutputSerializer, "the idempotency key's existing action"),
        },
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        serializer = self.InputSerializer(data=request.data, context=_catalog_context())
        serializer.is_valid(raise_exception=True)
        spec: ActionSpec = serializer.validated_data
        job = resolve_job(principal, serializer.job_id)
        check_trajectories(job_id=job.pk, specs=[spec], field=None)
        submitted = services.action_submit(job=job, spec=spec)
        code = status.HTTP_201_CREATED if submitted.created else status.HTTP_200_OK
        return Response(ActionOutputSerializer(submitted.action).data, status=code)


class ActionBatchApi(APIView):
    """POST: submit up to LOOM_MAX_BATCH actions at once; all are valid or none is stored."""

    class InputSerializer(serializers.Serializer):
        job = serializers.IntegerField(
            required=False, min_value=1, max_value=INT64_MAX, help_text="staff only; job keys omit"
        )
        items = ActionItemSerializer(many=True, allow_empty=False)

    class OutputSerializer(serializers.Serializer):
        count = serializers.IntegerField()
        created = serializers.IntegerField(help_text="new actions (the rest were idempotent hits)")
        items = serializers.ListField(
            child=inline_serializer(
                name="ActionBatchItem",
                fields={
                    "id": serializers.IntegerField(),
                    "job": serializers.IntegerField(),
                    "status": serializers.ChoiceField(choices=ActionStatus.choices),
                    "idempotency_key": serializers.CharField(allow_null=True),
                    "created": serializers.BooleanField(
                        help_text="false: the idempotency key's existing action"
                    ),
                },
            ),
            help_text="one entry per submitted item, in order",
        )

    @extend_schema(request=InputSerializer, responses={201: OutputSerializer})
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        limit = settings.LOOM_MAX_BATCH
        items = request.data.get("items") if isinstance(request.data, dict) else None
        if isinstance(items, list) and len(items) > limit:
            raise ApiError(
                field="items", reason=f"at most {limit} actions per batch, got {len(items)}"
            )
        serializer = self.InputSerializer(data=request.data, context=_catalog_context())
        serializer.is_valid(raise_exception=True)
        specs: list[ActionSpec] = serializer.validated_data["items"]
        job = resolve_job(principal, serializer.validated_data.get("job"))
        check_trajectories(job_id=job.pk, specs=specs, field="items")
        submitted = services.action_submit_batch(job=job, specs=specs)
        body = {
            "count": len(submitted),
            "created": sum(1 for entry in submitted if entry.created),
            "items": [
                {
                    "id": entry.action.pk,
                    "job": job.pk,
                    "status": entry.action.status,
                    "idempotency_key": entry.action.idempotency_key,
                    "created": entry.created,
                }
                for entry in submitted
            ],
        }
        return Response(body, status=status.HTTP_201_CREATED)


class ActionDetailApi(APIView):
    @extend_schema(responses=ActionOutputSerializer)
    def get(self, request: Request, action_id: int) -> Response:
        action = selectors.action_get(principal=principal_of(request), action_id=action_id)
        return Response(ActionOutputSerializer(action).data)


class ActionCancelApi(APIView):
    """POST: cancel a queued, scheduled or running action; 409 once it has ended."""

    class InputSerializer(serializers.Serializer):
        reason = serializers.CharField(required=False, max_length=1000)

    @extend_schema(request=InputSerializer, responses=ActionOutputSerializer)
    def post(self, request: Request, action_id: int) -> Response:
        principal = principal_of(request)
        action = selectors.action_get(principal=principal, action_id=action_id)
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        reason = serializer.validated_data.get("reason", "cancelled through the API")
        if not services.action_cancel(action_id=action.pk, reason=reason):
            action.refresh_from_db(fields=["status"])
            raise Conflict(field="status", reason=f"action {action.pk} already {action.status}")
        action.refresh_from_db()
        return Response(ActionOutputSerializer(action).data)


class ActionResultApi(APIView):
    """GET: the result as soon as the action ends (200), or 202 when ``wait`` seconds pass."""

    class QuerySerializer(serializers.Serializer):
        wait = FiniteFloatField(
            required=False,
            default=0.0,
            min_value=0.0,
            max_value=60.0,
            help_text="seconds to wait for the action to end (0..60)",
        )

    @extend_schema(
        parameters=[QuerySerializer],
        responses={
            200: ActionResultSerializer,
            202: OpenApiResponse(ActionResultSerializer, "still active when the wait ran out"),
        },
    )
    def get(self, request: Request, action_id: int) -> Response:
        principal = principal_of(request)
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        wait: float = query.validated_data["wait"]
        action = selectors.action_get(principal=principal, action_id=action_id)
        if not action.is_terminal and wait > 0:
            with get_notifier().subscribe(action.pk) as subscription:
                action.refresh_from_db()  # an end between the first read and subscribe
                if not action.is_terminal:
                    release_connection()
                    subscription.wait(wait)
                    action.refresh_from_db()
        code = status.HTTP_200_OK if action.is_terminal else status.HTTP_202_ACCEPTED
        return Response(ActionResultSerializer(action).data, status=code)


def release_connection() -> None:
    """Give the database connection back while a long-poll waits (it may wait 60 s), so that
    waiting requests never exhaust PostgreSQL's connections; the re-read takes a fresh one."""
    if not connection.in_atomic_block:
        connection.close()


class ActionAwaitApi(APIView):
    """POST: long-poll for any of ``ids`` to end; returns those that have ended (maybe none)."""

    MAX_IDS = 10_000

    class InputSerializer(serializers.Serializer):
        ids = serializers.ListField(
            child=serializers.IntegerField(min_value=1, max_value=INT64_MAX),
            allow_empty=False,
            max_length=10_000,
        )
        wait = FiniteFloatField(required=False, default=0.0, min_value=0.0, max_value=60.0)

    class OutputSerializer(serializers.Serializer):
        ended = ActionResultSerializer(many=True)
        pending = serializers.ListField(child=serializers.IntegerField())

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        ids: list[int] = list(dict.fromkeys(serializer.validated_data["ids"]))
        wait: float = serializer.validated_data["wait"]
        visible = selectors.action_queryset(principal=principal).filter(pk__in=ids)
        found = set(visible.values_list("pk", flat=True))
        missing = [index for index, pk in enumerate(ids) if pk not in found]
        if missing:
            raise ApiError(
                field=f"ids[{missing[0]}]",
                reason=f"no action {ids[missing[0]]} visible to this key",
                status_code=status.HTTP_404_NOT_FOUND,
            )
        ended = list(visible.filter(status__in=TERMINAL_STATUSES))
        if not ended and wait > 0:
            with get_notifier().subscribe(*ids) as subscription:
                ended = list(visible.filter(status__in=TERMINAL_STATUSES))
                if not ended:
                    release_connection()
                    subscription.wait(wait)
                    ended = list(visible.filter(status__in=TERMINAL_STATUSES))
        ended_ids = {action.pk for action in ended}
        body = {
            "ended": ActionResultSerializer(ended, many=True).data,
            "pending": [pk for pk in ids if pk not in ended_ids],
        }
        return Response(body)


@extend_schema_view(get=extend_schema(exclude=True))
class ActionResultNoSlashApi(ActionResultApi):
    """``/result?wait=30`` as the README spells it, without a trailing-slash redirect."""
