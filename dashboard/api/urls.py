"""The REST API's URLs (`/api/v1/`): one router for every app's resources, so that the API root lists them all
and a request's path is matched against one set of routes. Each app registers its own (`<app>/api/urls.py`); the jobs
come first, as the resource asked for most: a route is found by trying each in turn, and behind the other eighteen
resources a jobs-list request spent about a fifteenth of its CPU finding its view (bench/api.py)."""

from billing.api.urls import router as billing
from identity.api.urls import router as identity
from jobs.api.urls import router as jobs
from monitoring.api.urls import router as monitoring
from pools.api.teams import TeamViewSet
from pools.api.urls import router as pools
from portal.api.routers import Router
from portal.api.views import ApiTokenViewSet, AuditEntryViewSet, MembershipViewSet
from teamdata.api.urls import router as teamdata

router = Router()
for app in (jobs, pools, billing, monitoring, teamdata, identity):
    for prefix, viewset, basename in app.registry:
        router.register(prefix, viewset, basename=basename)
router.register("teams", TeamViewSet, basename="team")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("tokens", ApiTokenViewSet, basename="apitoken")
router.register("audit", AuditEntryViewSet, basename="auditentry")
urlpatterns = router.urls
