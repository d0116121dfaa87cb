from rest_framework.routers import SimpleRouter

from apps.policies import apis

router = SimpleRouter()
router.register("policies", apis.PolicyViewSet, basename="policy")

urlpatterns = router.urls
