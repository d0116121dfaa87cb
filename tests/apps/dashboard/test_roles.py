from typing import Any

from django.contrib.auth.models import AnonymousUser, Group

from apps.dashboard.roles import (
    ADMIN_GROUP,
    OPERATOR_GROUP,
    roles_ensure,
    user_can_operate,
    user_can_view,
    user_role_name,
)


def test_roles_ensure_is_idempotent_and_grants_exactly_the_role_permissions(db: Any) -> None:
    roles_ensure()
    roles_ensure()
    assert Group.objects.filter(name__in=[OPERATOR_GROUP, ADMIN_GROUP]).count() == 2
    operator = set(
        Group.objects.get(name=OPERATOR_GROUP).permissions.values_list("codename", flat=True)
    )
    admin = set(Group.objects.get(name=ADMIN_GROUP).permissions.values_list("codename", flat=True))
    assert operator == {"view_dashboard"}
    assert admin == {"view_dashboard", "operate_dashboard"}


def test_each_role_can_do_what_it_should(
    operator_user: Any, admin_user: Any, roleless_user: Any
) -> None:
    assert (user_can_view(operator_user), user_can_operate(operator_user)) == (True, False)
    assert (user_can_view(admin_user), user_can_operate(admin_user)) == (True, True)
    assert (user_can_view(roleless_user), user_can_operate(roleless_user)) == (False, False)
    assert user_role_name(AnonymousUser()) == "none"
    assert [user_role_name(u) for u in (operator_user, admin_user)] == ["operator", "admin"]


def test_superuser_is_admin_and_inactive_user_is_nobody(db: Any) -> None:
    from tests.factories import StaffFactory

    root: Any = StaffFactory(username="root")
    assert user_role_name(root) == "admin"
    root.is_active = False
    assert user_role_name(root) == "none"
