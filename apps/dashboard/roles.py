"""Operator roles: a read-only operator and an admin, as Django groups with two permissions.

``dashboard.view_dashboard`` lets a person watch every page and subscribe to live data;
``dashboard.operate_dashboard`` additionally lets them change policies, cancel actions, drain and
resume nodes and launch runs. Superusers hold both implicitly. API keys stay in the Django admin.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, Group, Permission, PermissionsMixin

VIEW_PERMISSION = "dashboard.view_dashboard"
OPERATE_PERMISSION = "dashboard.operate_dashboard"

OPERATOR_GROUP = "Loom operators (read-only)"
ADMIN_GROUP = "Loom admins"

_ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    OPERATOR_GROUP: ("view_dashboard",),
    ADMIN_GROUP: ("view_dashboard", "operate_dashboard"),
}


def roles_ensure() -> dict[str, Group]:
    """Create (or repair) the two role groups with exactly their permissions; idempotent."""
    groups: dict[str, Group] = {}
    for group_name, codenames in _ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=group_name)
        permissions = Permission.objects.filter(
            content_type__app_label="dashboard", codename__in=codenames
        )
        group.permissions.set(permissions)
        groups[group_name] = group
    return groups


def roles_ensure_after_migrate(**kwargs: Any) -> None:
    """post_migrate receiver: permissions exist by now, so the groups can point at them."""
    roles_ensure()


def _has_perm(user: AbstractBaseUser | AnonymousUser, permission: str) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    return isinstance(user, PermissionsMixin) and user.has_perm(permission)


def user_can_view(user: AbstractBaseUser | AnonymousUser) -> bool:
    """True for anyone allowed to watch the dashboard."""
    return _has_perm(user, VIEW_PERMISSION)


def user_can_operate(user: AbstractBaseUser | AnonymousUser) -> bool:
    """True for anyone allowed to change things from the dashboard."""
    return _has_perm(user, OPERATE_PERMISSION)


def user_role_name(user: AbstractBaseUser | AnonymousUser) -> str:
    """``admin``, ``operator`` or ``none``: what the frontend shows and gates its controls on."""
    if user_can_operate(user):
        return "admin"
    if user_can_view(user):
        return "operator"
    return "none"
