"""Dashboard URLs: include at the site root (``path("", include("apps.dashboard.urls"))``)."""

from django.urls import include, path

from apps.dashboard import apis, apis_planes, apis_rollouts, views

app_name = "dashboard"

api = [
    path("me", apis.MeApi.as_view(), name="api-me"),
    path("overview", apis.OverviewApi.as_view(), name="api-overview"),
    path("pools/<slug:name>", apis.PoolApi.as_view(), name="api-pool"),
    path("nodes/<int:node_id>/drain", apis.NodeDrainApi.as_view(), name="api-node-drain"),
    path("nodes/<int:node_id>/resume", apis.NodeResumeApi.as_view(), name="api-node-resume"),
    path("jobs", apis.JobsApi.as_view(), name="api-jobs"),
    path("jobs/<int:job_id>", apis.JobApi.as_view(), name="api-job"),
    path("jobs/<int:job_id>/actions", apis.JobActionsApi.as_view(), name="api-job-actions"),
    path("actions/<int:action_id>", apis.ActionApi.as_view(), name="api-action"),
    path("actions/<int:action_id>/cancel", apis.ActionCancelApi.as_view(), name="api-cancel"),
    path("policies", apis.PoliciesApi.as_view(), name="api-policies"),
    path("policies/<slug:name>", apis.PoolPolicyApi.as_view(), name="api-pool-policy"),
    path("launch/demo", apis.LaunchDemoApi.as_view(), name="api-launch-demo"),
    path("launch/simulate", apis.SimulateApi.as_view(), name="api-simulate"),
    path("launch/simulations/<int:run_id>", apis.SimulationApi.as_view(), name="api-simulation"),
    path("gpus", apis_planes.GpuMapApi.as_view(), name="api-gpus"),
    path("buffers", apis_planes.BuffersApi.as_view(), name="api-buffers"),
    path("buffers/<int:buffer_id>", apis_planes.BufferApi.as_view(), name="api-buffer"),
    path("rollouts", apis_planes.RolloutsApi.as_view(), name="api-rollouts"),
    path("rollouts/routers", apis_rollouts.RouterPoliciesApi.as_view(), name="api-routers"),
    path(
        "rollouts/routers/<slug:router>/policy",
        apis_rollouts.RouterPolicyApi.as_view(),
        name="api-router-policy",
    ),
]

pages = [
    path("", views.spa_shell, name="overview"),
    path("pools/<slug:pool>", views.spa_shell, name="pool"),
    path("jobs", views.spa_shell, name="jobs"),
    path("jobs/<int:job>", views.spa_shell, name="job"),
    path("actions/<int:action>", views.spa_shell, name="action"),
    path("policies", views.spa_shell, name="policies"),
    path("launch", views.spa_shell, name="launch"),
    path("gpus", views.spa_shell, name="gpus"),
    path("buffers", views.spa_shell, name="buffers"),
    path("buffers/<int:buffer>", views.spa_shell, name="buffer"),
    path("rollouts", views.spa_shell, name="rollouts"),
]

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("dashboard/api/", include(api)),
    *pages,
]
