"""DRF permission classes for the dashboard's JSON endpoints (session auth, operator roles)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from apps.dashboard.roles import user_can_operate, user_can_view


class DashboardRole(BasePermission):
    """Reads need the operator role; writes need the admin role."""

    message = "the dashboard needs the operator role; changes need the admin role"

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return user_can_view(request.user)
        return user_can_operate(request.user)
