"""Reads for jobs and keys, always through what the principal may see."""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from apps.jobs.access import Principal, jobs_visible_to
from apps.jobs.models import ApiKey, Job


def job_list(*, principal: Principal) -> QuerySet[Job]:
    return jobs_visible_to(principal).select_related("owner")


def job_get(*, principal: Principal, job_id: int) -> Job:
    return get_object_or_404(job_list(principal=principal), pk=job_id)


def api_key_list(*, job: Job) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(job=job).order_by("-id")


def api_key_get(*, job: Job, key_id: int) -> ApiKey:
    return get_object_or_404(api_key_list(job=job), pk=key_id)
