"""The dashboard's JSON endpoints under ``/dashboard/api/`` (session auth, operator roles).

Thin views (STYLE.md items 1–2): parse with a nested InputSerializer, check the role, call one
selector or service, return its dict. Errors use Loom's shape ``{"errors": [{"field", "reason"}]}``.
"""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.actions.models import Action
from apps.dashboard import selectors, services, simulation
from apps.dashboard.live.snapshots import node_view
from apps.dashboard.models import SimulationRun
from apps.dashboard.permissions import DashboardRole
from apps.dashboard.roles import user_role_name
from apps.jobs.models import Job
from apps.resources.models import Node, ResourcePool


def _errors(errors: list[dict[str, str]], code: int = status.HTTP_400_BAD_REQUEST) -> Response:
    return Response({"errors": errors}, status=code)


def _forbidden(reason: str) -> Response:
    return _errors([{"field": "role", "reason": reason}], status.HTTP_403_FORBIDDEN)


class DashboardApi(APIView):
    authentication_classes = [SessionAuthentication]
    permission_classes = [DashboardRole]


class MeApi(DashboardApi):
    permission_classes = []

    def get(self, request: Request) -> Response:
        if not request.user.is_authenticated:
            return _errors(
                [{"field": "session", "reason": "log in first"}], status.HTTP_401_UNAUTHORIZED
            )
        return Response(
            {"username": request.user.get_username(), "role": user_role_name(request.user)}
        )


class OverviewApi(DashboardApi):
    def get(self, request: Request) -> Response:
        return Response(selectors.overview())


class PoolApi(DashboardApi):
    def get(self, request: Request, name: str) -> Response:
        return Response(selectors.pool_detail(get_object_or_404(ResourcePool, name=name)))


class NodeDrainApi(DashboardApi):
    draining = True

    def post(self, request: Request, node_id: int) -> Response:
        node = get_object_or_404(Node.objects.select_related("pool"), pk=node_id)
        try:
            node = services.dashboard_node_set_draining(
                user=request.user, node=node, draining=self.draining
            )
        except services.DashboardForbidden as refusal:
            return _forbidden(str(refusal))
        except services.DashboardInputError as error:
            return _errors(error.errors, status.HTTP_409_CONFLICT)
        return Response(node_view(node))


class NodeResumeApi(NodeDrainApi):
    draining = False


class JobsApi(DashboardApi):
    def get(self, request: Request) -> Response:
        return Response({"results": selectors.jobs_list()})


class JobApi(DashboardApi):
    def get(self, request: Request, job_id: int) -> Response:
        return Response(selectors.job_detail(get_object_or_404(Job, pk=job_id)))


class JobActionsApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        status = serializers.CharField(required=False, allow_blank=True)
        tool = serializers.CharField(required=False, allow_blank=True, max_length=100)
        pool = serializers.CharField(required=False, allow_blank=True, max_length=100)
        trajectory = serializers.CharField(required=False, allow_blank=True, max_length=20)
        cursor = serializers.CharField(required=False, allow_blank=True, max_length=20)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500)

    query_serializers = {"GET": InputSerializer}

    def get(self, request: Request, job_id: int) -> Response:
        job = get_object_or_404(Job, pk=job_id)
        params = self.InputSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = dict(params.validated_data)
        cursor = data.pop("cursor", None) or None
        limit = data.pop("limit", selectors.ACTIONS_PAGE_SIZE)
        try:
            page = selectors.job_actions(job, data, cursor=cursor, limit=limit)
        except selectors.FilterError as error:
            return _errors([{"field": error.field, "reason": error.reason}])
        return Response(page)


class ActionApi(DashboardApi):
    def get(self, request: Request, action_id: int) -> Response:
        action = get_object_or_404(
            Action.objects.select_related("tool", "service", "pool", "node"), pk=action_id
        )
        return Response(selectors.action_detail(action))


class ActionCancelApi(DashboardApi):
    def post(self, request: Request, action_id: int) -> Response:
        action = get_object_or_404(Action.objects.select_related("job"), pk=action_id)
        try:
            cancelled = services.dashboard_action_cancel(user=request.user, action=action)
        except services.DashboardForbidden as refusal:
            return _forbidden(str(refusal))
        action.refresh_from_db()
        if not cancelled:
            return _errors(
                [{"field": "status", "reason": f"action already ended ({action.status})"}],
                status.HTTP_409_CONFLICT,
            )
        return Response(selectors.action_detail(action))


class PoliciesApi(DashboardApi):
    def get(self, request: Request) -> Response:
        return Response(selectors.policies_overview())


class PoolPolicyApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        settings = serializers.JSONField()

    def post(self, request: Request, name: str) -> Response:
        pool = get_object_or_404(ResourcePool, name=name)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            services.dashboard_policy_save(
                user=request.user, pool=pool, settings=body.validated_data["settings"]
            )
        except services.DashboardForbidden as refusal:
            return _forbidden(str(refusal))
        except services.DashboardInputError as error:
            return _errors(error.errors)
        return Response(selectors.pool_policies(pool), status=status.HTTP_201_CREATED)


class LaunchDemoApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        pool = serializers.SlugField()
        count = serializers.IntegerField()
        duration_s = serializers.FloatField()
        seed = serializers.IntegerField(required=False, allow_null=True)

    def post(self, request: Request) -> Response:
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        pool = ResourcePool.objects.filter(name=data["pool"]).first()
        if pool is None:
            return _errors([{"field": "pool", "reason": f"unknown pool {data['pool']!r}"}])
        try:
            job, submitted = services.dashboard_launch_demo(
                user=request.user,
                pool=pool,
                count=data["count"],
                mean_duration_s=data["duration_s"],
                seed=data.get("seed"),
            )
        except services.DashboardForbidden as refusal:
            return _forbidden(str(refusal))
        except services.DashboardInputError as error:
            return _errors(error.errors)
        return Response({"job": job.pk, "submitted": submitted}, status=status.HTTP_201_CREATED)


def _run_json(run: SimulationRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "status": run.status,
        "params": run.params,
        "result": run.result,
        "error": run.error,
    }


class SimulateApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        trace = serializers.JSONField()
        policies = serializers.ListField(child=serializers.JSONField(), min_length=1, max_length=2)

    def post(self, request: Request) -> Response:
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            run = simulation.simulation_start(
                user=request.user,
                trace=body.validated_data["trace"],
                policies=body.validated_data["policies"],
            )
        except services.DashboardForbidden as refusal:
            return _forbidden(str(refusal))
        except services.DashboardInputError as error:
            return _errors(error.errors)
        run.refresh_from_db()
        return Response(_run_json(run), status=status.HTTP_201_CREATED)


class SimulationApi(DashboardApi):
    def get(self, request: Request, run_id: int) -> Response:
        return Response(_run_json(get_object_or_404(SimulationRun, pk=run_id)))
