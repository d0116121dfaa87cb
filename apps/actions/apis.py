"""Action endpoints: submit (one or a batch), list, retrieve, cancel, await the result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError
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

from apps.actions import selectors, services, waiting
from apps.actions.models import Action, ActionStatus
from apps.actions.serializers import ActionItemSerializer, check_trajectories
from apps.actions.services import ActionSpec
from apps.jobs.access import principal_of
from apps.jobs.models import Job
from apps.jobs.selectors import job_for_submit
from apps.resources.models import ResourcePool, Service, Tool
from controlplane.api.errors import ApiError, Conflict
from controlplane.api.fields import INT64_MAX, FiniteFloatField
from controlplane.api.representation import ReusedFieldsMixin
from controlplane.api.views import CursorListView
from controlplane.http_bridge import HANGUP_KEY, Hangup

T = TypeVar("T")


class ActionOutputSerializer(ReusedFieldsMixin, serializers.ModelSerializer):
    tool: serializers.SlugRelatedField[Tool] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    service: serializers.SlugRelatedField[Service] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    pool: serializers.SlugRelatedField[ResourcePool] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    node = serializers.SerializerMethodField(
        help_text="the node it was placed on (its allocation's); null before it is scheduled"
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
            "request",
            "priority",
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
            "service_timings",
            "cache_events",
            "idempotency_key",
        ]
        read_only_fields = fields

    def get_node(self, action: Action) -> str | None:
        """The allocation names the node it was written with; the foreign key can be null while
        it does (the node's row deleted: ``SET_NULL``) and costs a query when not joined."""
        allocation = action.allocation
        if isinstance(allocation, dict) and isinstance(allocation.get("node"), str):
            return str(allocation["node"])
        node = action.node if action.node_id is not None else None
        return node.name if node is not None else None

    def get_act_s(self, action: Action) -> float | None:
        if action.finished_at is None:
            return None
        return (action.finished_at - action.submitted_at).total_seconds()


class ActionResultSerializer(ActionOutputSerializer):
    class Meta(ActionOutputSerializer.Meta):
        # The columns the await endpoint reads (``selectors.RESULT_FIELDS``), and the ACT.
        fields = [*selectors.RESULT_FIELDS, "act_s"]
        read_only_fields = fields


def wait_field(help_text: str) -> FiniteFloatField:
    """A long-poll's ``wait``: seconds, 0 (answer at once) up to 60."""
    return FiniteFloatField(
        required=False, default=0.0, min_value=0.0, max_value=60.0, help_text=help_text
    )


_WAIT = wait_field("")


def wait_param(request: Request) -> float:
    """The ``wait`` query parameter, validated as ``wait_field`` says (one field, not a whole
    serializer per request: these are the hot endpoints)."""
    raw = request.query_params.get("wait")
    if raw is None:
        return 0.0
    try:
        return float(_WAIT.run_validation(raw))
    except serializers.ValidationError as error:
        raise serializers.ValidationError({"wait": error.detail}) from None


def hangup_of(request: Request) -> Hangup | None:
    """What tells a long-poll that its client hung up (``controlplane.http_bridge``), if any."""
    hangup = request.META.get(HANGUP_KEY)
    return hangup if isinstance(hangup, Hangup) else None


def with_catalog(attempt: Callable[[selectors.SubmitCatalog], T]) -> T:
    """Run a submission against the cached catalog and, if it fails on a name (400) or on a row
    that has gone (IntegrityError), once more against a fresh one: a name registered or a row
    deleted behind the generation's back (``apps.resources.generation``) never fails a
    submission. A rename behind its back is seen within ``selectors.CATALOG_MAX_AGE_S``."""
    try:
        return attempt(selectors.submit_catalog())
    except (serializers.ValidationError, IntegrityError):
        return attempt(selectors.submit_catalog(fresh=True))


def prime_names(action: Action, catalog: selectors.SubmitCatalog) -> None:
    """Give a new action its pool, tool and service from the catalog, so the response names
    them without a query each."""
    if (pool := catalog.pool_by_id(action.pool_id)) is not None:
        action.pool = pool
    if (tool := catalog.tool_by_id(action.tool_id)) is not None:
        action.tool = tool
    if (service := catalog.service_by_id(action.service_id)) is not None:
        action.service = service


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
        service = serializers.SlugField(required=False, max_length=100)
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
            service_name=filters.get("service"),
            submitted_after=filters.get("submitted_after"),
            submitted_before=filters.get("submitted_before"),
        )

    @extend_schema(parameters=[FilterSerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    class SubmitQuerySerializer(serializers.Serializer):
        wait = wait_field(
            "seconds to wait for the new action to end before answering (0..60): submit and "
            "result in one request; the body is the action as it is when the wait ends"
        )

    query_serializers = {"POST": SubmitQuerySerializer}

    @extend_schema(
        parameters=[SubmitQuerySerializer],
        request=InputSerializer,
        responses={
            201: ActionOutputSerializer,
            200: OpenApiResponse(ActionOutputSerializer, "the idempotency key's existing action"),
        },
    )
    def post(self, request: Request) -> Response:
        wait = wait_param(request)

        def attempt(catalog: selectors.SubmitCatalog) -> services.Submitted:
            serializer = self.InputSerializer(data=request.data, context={"catalog": catalog})
            serializer.is_valid(raise_exception=True)
            spec: ActionSpec = serializer.validated_data
            job = job_for_submit(request=request, job_id=serializer.job_id)
            check_trajectories(job_id=job.pk, specs=[spec], field=None)
            return services.action_submit_and_wait(
                job=job, spec=spec, wait=wait, hangup=hangup_of(request)
            )

        submitted = with_catalog(attempt)
        action = submitted.action
        if submitted.created:
            prime_names(action, selectors.submit_catalog())
        code = status.HTTP_201_CREATED if submitted.created else status.HTTP_200_OK
        return Response(ActionOutputSerializer.render(action), status=code)


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
            help_text="one entry per submitted item, in order (`representation=full`: each the "
            "whole action plus `created`)",
        )

    class QuerySerializer(serializers.Serializer):
        representation = serializers.ChoiceField(
            choices=["summary", "full"],
            default="summary",
            help_text="full: each item is the whole action, as POST /actions/ answers, plus "
            "`created` (the SDK's coalesced submits use it)",
        )

    query_serializers = {"POST": QuerySerializer}

    @extend_schema(
        parameters=[QuerySerializer], request=InputSerializer, responses={201: OutputSerializer}
    )
    def post(self, request: Request) -> Response:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        full = query.validated_data["representation"] == "full"
        limit = settings.LOOM_MAX_BATCH
        items = request.data.get("items") if isinstance(request.data, dict) else None
        if isinstance(items, list) and len(items) > limit:
            raise ApiError(
                field="items", reason=f"at most {limit} actions per batch, got {len(items)}"
            )

        def attempt(catalog: selectors.SubmitCatalog) -> tuple[Job, list[services.Submitted]]:
            serializer = self.InputSerializer(data=request.data, context={"catalog": catalog})
            serializer.is_valid(raise_exception=True)
            specs: list[ActionSpec] = serializer.validated_data["items"]
            job = job_for_submit(request=request, job_id=serializer.validated_data.get("job"))
            check_trajectories(job_id=job.pk, specs=specs, field="items")
            return job, services.action_submit_batch(job=job, specs=specs)

        job, submitted = with_catalog(attempt)
        body = {
            "count": len(submitted),
            "created": sum(1 for entry in submitted if entry.created),
            "items": _full_items(submitted) if full else _summary_items(job, submitted),
        }
        return Response(body, status=status.HTTP_201_CREATED)


def _summary_items(job: Job, submitted: list[services.Submitted]) -> list[dict[str, Any]]:
    return [
        {
            "id": entry.action.pk,
            "job": job.pk,
            "status": entry.action.status,
            "idempotency_key": entry.action.idempotency_key,
            "created": entry.created,
        }
        for entry in submitted
    ]


def _full_items(submitted: list[services.Submitted]) -> list[dict[str, Any]]:
    """Each action as ``POST /actions/`` renders it, plus ``created``. New actions take their
    names from the catalog; an idempotency key's existing actions are read with theirs."""
    catalog = selectors.submit_catalog()
    existing_ids = {entry.action.pk for entry in submitted if not entry.created}
    existing = selectors.actions_in_bulk(action_ids=existing_ids)
    items = []
    for entry in submitted:
        action = entry.action if entry.created else existing.get(entry.action.pk, entry.action)
        if entry.created:
            prime_names(action, catalog)
        items.append(ActionOutputSerializer.render(action) | {"created": entry.created})
    return items


class ActionDetailApi(APIView):
    @extend_schema(responses=ActionOutputSerializer)
    def get(self, request: Request, action_id: int) -> Response:
        action = selectors.action_get(principal=principal_of(request), action_id=action_id)
        return Response(ActionOutputSerializer.render(action))


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
        return Response(ActionOutputSerializer.render(action))


class ActionResultApi(APIView):
    """GET: the result as soon as the action ends (200), or 202 when ``wait`` seconds pass."""

    class QuerySerializer(serializers.Serializer):
        wait = wait_field("seconds to wait for the action to end (0..60)")

    query_serializers = {"GET": QuerySerializer}

    @extend_schema(
        parameters=[QuerySerializer],
        responses={
            200: ActionResultSerializer,
            202: OpenApiResponse(ActionResultSerializer, "still active when the wait ran out"),
        },
    )
    def get(self, request: Request, action_id: int) -> Response:
        action = waiting.action_result_await(
            principal=principal_of(request),
            action_id=action_id,
            seconds=wait_param(request),
            hangup=hangup_of(request),
        )
        code = status.HTTP_200_OK if action.is_terminal else status.HTTP_202_ACCEPTED
        return Response(ActionResultSerializer.render(action), status=code)


class ActionAwaitApi(APIView):
    """POST: long-poll for any of ``ids`` to end; returns those that have ended (maybe none)."""

    MAX_IDS = 10_000

    class InputSerializer(serializers.Serializer):
        ids = serializers.ListField(
            child=serializers.IntegerField(min_value=1, max_value=INT64_MAX),
            allow_empty=False,
            max_length=10_000,
        )
        wait = wait_field("seconds to wait for any of them to end (0..60)")

    class OutputSerializer(serializers.Serializer):
        ended = ActionResultSerializer(many=True)
        pending = serializers.ListField(child=serializers.IntegerField())

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        ids: list[int] = list(dict.fromkeys(serializer.validated_data["ids"]))
        ended = waiting.actions_ended_await(
            principal=principal_of(request),
            action_ids=ids,
            seconds=serializer.validated_data["wait"],
            hangup=hangup_of(request),
        )
        ended_ids = {action.pk for action in ended}
        body = {
            "ended": ActionResultSerializer.render_many(ended),
            "pending": [pk for pk in ids if pk not in ended_ids],
        }
        return Response(body)


@extend_schema_view(get=extend_schema(exclude=True))
class ActionResultNoSlashApi(ActionResultApi):
    """``/result?wait=30`` as the README spells it, without a trailing-slash redirect."""
