from rest_framework.routers import DefaultRouter

from .views import ApiTokenViewSet, AuditEntryViewSet, MembershipViewSet, TeamViewSet

router = DefaultRouter()
router.register("teams", TeamViewSet, basename="team")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("tokens", ApiTokenViewSet, basename="apitoken")
router.register("audit", AuditEntryViewSet, basename="auditentry")
urlpatterns = router.urls
