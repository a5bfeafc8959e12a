"""The API root (`/api/v1/`): the portal's teams, memberships, tokens and audit log, listed first, as before the
dashboard was its own app. Each app's router is included beside it in `dashboard/urls.py`."""

from rest_framework.routers import DefaultRouter

from pools.api.teams import TeamViewSet
from portal.api.views import ApiTokenViewSet, AuditEntryViewSet, MembershipViewSet

router = DefaultRouter()
router.register("teams", TeamViewSet, basename="team")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("tokens", ApiTokenViewSet, basename="apitoken")
router.register("audit", AuditEntryViewSet, basename="auditentry")
urlpatterns = router.urls
