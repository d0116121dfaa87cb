"""Who is asking: a job key (sees one job), a staff user or key (sees all), or a session user.

Every selector filters through ``jobs_visible_to`` so an object of another job is a 404, never a
403 that would confirm it exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from apps.jobs.models import ApiKey, Job


@dataclass(frozen=True)
class Principal:
    user_id: int | None
    job_id: int | None
    is_staff: bool

    @property
    def is_job_key(self) -> bool:
        return self.job_id is not None


def principal_of(request: Request) -> Principal:
    """The principal of an authenticated request (job key, staff key/session, or session user)."""
    auth = request.auth
    if isinstance(auth, ApiKey) and auth.job_id is not None:
        return Principal(user_id=None, job_id=auth.job_id, is_staff=False)
    user: Any = request.user
    if user is None or not user.is_authenticated:
        return Principal(user_id=None, job_id=None, is_staff=False)
    return Principal(user_id=user.pk, job_id=None, is_staff=bool(user.is_staff))


def acting_user(request: Request) -> User:
    """The authenticated user behind the request (a job key acts as its job's owner)."""
    user = request.user
    if not isinstance(user, User) or not user.is_authenticated:
        raise NotAuthenticated()
    return user


def jobs_visible_to(principal: Principal) -> QuerySet[Job]:
    jobs = Job.objects.all()
    if principal.is_staff:
        return jobs
    if principal.job_id is not None:
        return jobs.filter(pk=principal.job_id)
    if principal.user_id is not None:
        return jobs.filter(owner_id=principal.user_id)
    return jobs.none()


def job_ids_filter(principal: Principal, field: str = "job_id") -> dict[str, Any]:
    """Keyword filter restricting a queryset of job-owned objects to what ``principal`` sees."""
    if principal.is_staff:
        return {}
    if principal.job_id is not None:
        return {field: principal.job_id}
    return {f"{field.removesuffix('_id')}__owner_id": principal.user_id}


class IsStaffPrincipal(BasePermission):
    """Staff users and staff keys; a job key never counts as staff, whoever owns its job."""

    message = "only staff (a staff session or staff API key) may do this"

    def has_permission(self, request: Request, view: Any) -> bool:
        return principal_of(request).is_staff


class IsStaffOrReadOnly(BasePermission):
    message = IsStaffPrincipal.message

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return bool(request.user and request.user.is_authenticated) or request.auth is not None
        return principal_of(request).is_staff
