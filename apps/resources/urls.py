from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.resources import apis

router = SimpleRouter()
router.register("pools", apis.ResourcePoolViewSet, basename="pool")
router.register("services", apis.ServiceViewSet, basename="service")
router.register("tools", apis.ToolViewSet, basename="tool")
router.register("quotas", apis.ApiQuotaViewSet, basename="quota")
router.register("nodes", apis.NodeViewSet, basename="node")

urlpatterns = [
    path("nodes/register/", apis.NodeRegisterApi.as_view(), name="node-register"),
    path("nodes/<int:node_id>/heartbeat/", apis.NodeHeartbeatApi.as_view(), name="node-heartbeat"),
    *router.urls,
]
