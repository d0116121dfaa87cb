"""JSON endpoints of the GPU map, buffer and Rollouts pages (session auth, operator roles).

Thin views as in ``apis.py``: a nested InputSerializer parses the query string (a bad value is a
400 naming the field, in Loom's error shape), an unknown id in the path is a 404, and one
selector builds the answer — the same one the live topic publishes (``live.snapshots``).
"""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apps.buffers.models import Buffer
from apps.dashboard import selectors_buffers, selectors_gpus, selectors_rollouts
from apps.dashboard.apis import DashboardApi, _errors
from apps.jobs.models import Job


def _job_or_error(job_id: int | None) -> tuple[Job | None, Response | None]:
    if job_id is None:
        return None, None
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return None, _errors([{"field": "job", "reason": f"unknown job {job_id}"}])
    return job, None


class GpuMapApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        pool = serializers.SlugField(required=False, max_length=100)

    query_serializers = {"GET": InputSerializer}

    def get(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        name = params.validated_data.get("pool")
        pools = selectors_gpus.gpu_pools(name)
        if name is not None and not pools:
            return _errors([{"field": "pool", "reason": f"no GPU pool named {name!r}"}])
        return Response(selectors_gpus.gpu_map(pools))


class BuffersApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        job = serializers.IntegerField(required=False, min_value=1)

    query_serializers = {"GET": InputSerializer}

    def get(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        job, refusal = _job_or_error(params.validated_data.get("job"))
        if refusal is not None:
            return refusal
        return Response(selectors_buffers.buffers_overview(job))


class BufferApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        limit = serializers.IntegerField(
            required=False, min_value=1, max_value=selectors_buffers.HISTORY_LIMIT
        )

    query_serializers = {"GET": InputSerializer}

    def get(self, request: Request, buffer_id: int) -> Response:
        buffer = get_object_or_404(Buffer.objects.select_related("job"), pk=buffer_id)
        params = self.InputSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        limit = params.validated_data.get("limit", selectors_buffers.HISTORY_LIMIT)
        return Response(selectors_buffers.buffer_detail(buffer, limit=limit))


class RolloutsApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        job = serializers.IntegerField(required=False, min_value=1)
        status = serializers.ChoiceField(
            choices=sorted(selectors_rollouts.STATUS_FILTERS),
            required=False,
            default=selectors_rollouts.ACTIVE,
        )
        limit = serializers.IntegerField(
            required=False, min_value=1, max_value=selectors_rollouts.TRAJECTORY_LIMIT
        )

    query_serializers = {"GET": InputSerializer}

    def get(self, request: Request) -> Response:
        params = self.InputSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        job, refusal = _job_or_error(data.get("job"))
        if refusal is not None:
            return refusal
        return Response(
            selectors_rollouts.rollouts(
                job=job,
                status=data["status"],
                limit=data.get("limit", selectors_rollouts.TRAJECTORY_LIMIT),
            )
        )
