from django.urls import path

from apps.jobs import apis

urlpatterns = [
    path("jobs/", apis.JobListCreateApi.as_view(), name="job-list"),
    path("jobs/<int:job_id>/", apis.JobDetailApi.as_view(), name="job-detail"),
    path("jobs/<int:job_id>/keys/", apis.JobKeysApi.as_view(), name="job-keys"),
    path(
        "jobs/<int:job_id>/keys/<int:key_id>/revoke/",
        apis.JobKeyRevokeApi.as_view(),
        name="job-key-revoke",
    ),
]
