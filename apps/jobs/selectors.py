"""Reads for jobs and keys, always through what the principal may see."""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from rest_framework.request import Request

from apps.jobs.access import Principal, jobs_visible_to, principal_of
from apps.jobs.models import ApiKey, Job, JobStatus
from controlplane.api.errors import ApiError, Conflict


def job_list(*, principal: Principal) -> QuerySet[Job]:
    return jobs_visible_to(principal).select_related("owner")


def job_get(*, principal: Principal, job_id: int) -> Job:
    return get_object_or_404(job_list(principal=principal), pk=job_id)


def job_for_submit(*, request: Request, job_id: int | None) -> Job:
    """The active job to submit into: a job key's own job, or the ``job`` a staff caller names
    (actions and trajectories alike); 400 if not visible, 409 if the job is not active."""
    principal = principal_of(request)
    if principal.job_id is not None:
        if job_id is not None and job_id != principal.job_id:
            raise ApiError(field="job", reason=f"no job {job_id} visible to this key")
        key = request.auth
        if isinstance(key, ApiKey) and ApiKey.job.is_cached(key) and key.job is not None:
            return _active(key.job)  # read with the key by the authentication, this request
        job_id = principal.job_id
    if job_id is None:
        raise ApiError(field="job", reason="this field is required (staff submit into a job)")
    job = job_list(principal=principal).filter(pk=job_id).first()
    if job is None:
        raise ApiError(field="job", reason=f"no job {job_id} visible to this key")
    return _active(job)


def _active(job: Job) -> Job:
    if job.status != JobStatus.ACTIVE:
        raise Conflict(field="job", reason=f"job {job.name!r} is {job.status}, not active")
    return job


def api_key_list(*, job: Job) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(job=job).order_by("-id")


def api_key_get(*, job: Job, key_id: int) -> ApiKey:
    return get_object_or_404(api_key_list(job=job), pk=key_id)
