"""The Rollouts page's writes: an operator sets a live LLM router's policy (Loom's own).

``GET rollouts/routers`` lists the stored policies with who changed them and when, and the
choices; ``POST rollouts/routers/<router>/policy`` ``{"policy", "predictor"}`` stores a new one
(the admin role, as every dashboard change) and the running router adopts it without a restart
(``apps.trajectories.router_control``, ``workers.router.live_policy``). Bad input is a 400
naming the field.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from apps.dashboard import selectors_rollouts
from apps.dashboard.apis import DashboardApi, _errors
from apps.trajectories.models import RouterPolicyName, RouterPredictorName
from apps.trajectories.router_control import ROUTER_NAME_MAX, router_policy_set


class RouterPoliciesApi(DashboardApi):
    def get(self, request: Request) -> Response:
        return Response(selectors_rollouts.router_policies())


class RouterPolicyApi(DashboardApi):
    class InputSerializer(serializers.Serializer[dict[str, Any]]):
        policy = serializers.ChoiceField(choices=RouterPolicyName.choices)
        predictor = serializers.ChoiceField(
            choices=RouterPredictorName.choices, default=RouterPredictorName.PROMPT_HISTORY
        )

    def post(self, request: Request, router: str) -> Response:
        if len(router) > ROUTER_NAME_MAX:
            return _errors([{"field": "router", "reason": f"at most {ROUTER_NAME_MAX} characters"}])
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = router_policy_set(
            router=router,
            policy=body.validated_data["policy"],
            predictor=body.validated_data["predictor"],
            user=request.user,
        )
        return Response(selectors_rollouts.router_policy_row(row), status=status.HTTP_201_CREATED)
