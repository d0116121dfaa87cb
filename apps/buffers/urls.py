from django.urls import path

from apps.buffers import apis

urlpatterns = [
    path("buffers/", apis.BufferListCreateApi.as_view(), name="buffer-list"),
    path("buffers/workflow/", apis.BufferWorkflowApi.as_view(), name="buffer-workflow"),
    path("buffers/<int:buffer_id>/", apis.BufferDetailApi.as_view(), name="buffer-detail"),
    path("buffers/<int:buffer_id>/records/", apis.BufferRecordsApi.as_view(), name="buffer-push"),
    path("buffers/<int:buffer_id>/gather/", apis.BufferGatherApi.as_view(), name="buffer-gather"),
    path("buffers/<int:buffer_id>/sample/", apis.BufferSampleApi.as_view(), name="buffer-sample"),
    path(
        "buffers/<int:buffer_id>/priorities/",
        apis.BufferPrioritiesApi.as_view(),
        name="buffer-priorities",
    ),
    path("buffers/<int:buffer_id>/stats/", apis.BufferStatsApi.as_view(), name="buffer-stats"),
    path(
        "buffers/<int:buffer_id>/history/", apis.BufferHistoryApi.as_view(), name="buffer-history"
    ),
]
