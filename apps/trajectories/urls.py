from django.urls import path

from apps.trajectories import apis

urlpatterns = [
    path("trajectories/", apis.TrajectoryListCreateApi.as_view(), name="trajectory-list"),
    path(
        "trajectories/<int:trajectory_id>/",
        apis.TrajectoryDetailApi.as_view(),
        name="trajectory-detail",
    ),
]
