"""The pools app's API resources, registered only: dashboard/api/urls.py serves every app's under `/api/v1/`."""

from rest_framework.routers import SimpleRouter

from .views import (
    NamespaceLimitsViewSet,
    NodeViewSet,
    PoolViewSet,
    QuotaRequestViewSet,
    QuotaViewSet,
    ReservationViewSet,
)

router = SimpleRouter()
router.register("pools", PoolViewSet, basename="pool")
router.register("nodes", NodeViewSet, basename="node")
router.register("reservations", ReservationViewSet, basename="reservation")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("namespace-limits", NamespaceLimitsViewSet, basename="namespace-limits")
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
