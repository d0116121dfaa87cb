"""Trajectory endpoints: create, list, retrieve, update progress."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.jobs.access import principal_of
from apps.jobs.selectors import job_for_submit
from apps.trajectories import selectors, services
from apps.trajectories.models import Trajectory, TrajectoryStatus
from controlplane.api.errors import ApiError, Conflict
from controlplane.api.fields import INT32_MAX, INT64_MAX, FiniteFloatField
from controlplane.api.views import CursorListView

MAX_SECONDS = 1e9


def _seconds(**kwargs: Any) -> FiniteFloatField:
    return FiniteFloatField(min_value=0.0, max_value=MAX_SECONDS, **kwargs)


class TrajectoryOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Trajectory
        fields = [
            "id",
            "job",
            "training_step",
            "prompt_id",
            "group_id",
            "sample_index",
            "status",
            "tokens",
            "steps",
            "predicted_remaining_tokens",
            "llm_worker",
            "queueing_s",
            "generation_s",
            "tool_s",
            "total_s",
            "reward",
            "created_at",
            "updated_at",
            "finished_at",
        ]
        read_only_fields = fields


class TrajectoryListCreateApi(CursorListView):
    """GET: trajectories, newest first. POST: register a trajectory of the job."""

    serializer_class = TrajectoryOutputSerializer

    class FilterSerializer(serializers.Serializer):
        job = serializers.IntegerField(required=False, min_value=1, max_value=INT64_MAX)
        status = serializers.MultipleChoiceField(choices=TrajectoryStatus.choices, required=False)
        training_step = serializers.IntegerField(required=False, min_value=0, max_value=INT32_MAX)
        group_id = serializers.CharField(required=False, max_length=200)

    class InputSerializer(serializers.Serializer):
        job = serializers.IntegerField(
            required=False, min_value=1, max_value=INT64_MAX, help_text="staff only; job keys omit"
        )
        training_step = serializers.IntegerField(required=False, min_value=0, max_value=INT32_MAX)
        prompt_id = serializers.CharField(required=False, allow_blank=True, max_length=200)
        group_id = serializers.CharField(required=False, allow_blank=True, max_length=200)
        sample_index = serializers.IntegerField(required=False, min_value=0, max_value=INT32_MAX)

    def get_queryset(self) -> Any:
        filters = self.filters()
        return selectors.trajectory_list(
            principal=principal_of(self.request),
            job_id=filters.get("job"),
            statuses=sorted(filters.get("status", ())),
            training_step=filters.get("training_step"),
            group_id=filters.get("group_id"),
        )

    @extend_schema(parameters=[FilterSerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(request=InputSerializer, responses={201: TrajectoryOutputSerializer})
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        job = job_for_submit(request=request, job_id=data.pop("job", None))
        trajectory = services.trajectory_create(job=job, **data)
        return Response(TrajectoryOutputSerializer(trajectory).data, status=status.HTTP_201_CREATED)


class TrajectoryDetailApi(APIView):
    """GET a trajectory; PATCH its progress (status, tokens, steps, prediction, timings)."""

    class InputSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=TrajectoryStatus.choices, required=False)
        tokens = serializers.IntegerField(required=False, min_value=0, max_value=INT64_MAX)
        steps = serializers.IntegerField(required=False, min_value=0, max_value=INT32_MAX)
        predicted_remaining_tokens = serializers.IntegerField(
            required=False, allow_null=True, min_value=0, max_value=INT64_MAX
        )
        llm_worker = serializers.CharField(required=False, allow_blank=True, max_length=200)
        queueing_s = _seconds(required=False)
        generation_s = _seconds(required=False)
        tool_s = _seconds(required=False)
        total_s = _seconds(required=False)
        reward = FiniteFloatField(required=False, allow_null=True)

    @extend_schema(responses=TrajectoryOutputSerializer)
    def get(self, request: Request, trajectory_id: int) -> Response:
        trajectory = selectors.trajectory_get(
            principal=principal_of(request), trajectory_id=trajectory_id
        )
        return Response(TrajectoryOutputSerializer(trajectory).data)

    @extend_schema(request=InputSerializer, responses=TrajectoryOutputSerializer)
    def patch(self, request: Request, trajectory_id: int) -> Response:
        trajectory = selectors.trajectory_get(
            principal=principal_of(request), trajectory_id=trajectory_id
        )
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            trajectory = services.trajectory_update(
                trajectory_id=trajectory.pk, changes=dict(serializer.validated_data)
            )
        except services.TrajectoryUpdateError as error:
            if error.conflict:
                raise Conflict(field=error.field, reason=error.reason) from None
            raise ApiError(field=error.field, reason=error.reason) from None
        return Response(TrajectoryOutputSerializer(trajectory).data)
