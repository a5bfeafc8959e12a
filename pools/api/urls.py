from rest_framework.routers import DefaultRouter

from .views import (
    NamespaceLimitsViewSet,
    NodeViewSet,
    PoolViewSet,
    QuotaRequestViewSet,
    QuotaViewSet,
    ReservationViewSet,
)

router = DefaultRouter()
router.register("pools", PoolViewSet, basename="pool")
router.register("nodes", NodeViewSet, basename="node")
router.register("reservations", ReservationViewSet, basename="reservation")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("namespace-limits", NamespaceLimitsViewSet, basename="namespace-limits")
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
urlpatterns = router.urls
