from django.urls import path

from apps.actions import apis

urlpatterns = [
    path("actions/", apis.ActionListSubmitApi.as_view(), name="action-list"),
    path("actions/batch/", apis.ActionBatchApi.as_view(), name="action-batch"),
    path("actions/await/", apis.ActionAwaitApi.as_view(), name="action-await"),
    path("actions/<int:action_id>/", apis.ActionDetailApi.as_view(), name="action-detail"),
    path("actions/<int:action_id>/cancel/", apis.ActionCancelApi.as_view(), name="action-cancel"),
    path("actions/<int:action_id>/result/", apis.ActionResultApi.as_view(), name="action-result"),
    path("actions/<int:action_id>/result", apis.ActionResultNoSlashApi.as_view()),
]
