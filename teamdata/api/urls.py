"""The teamdata app's API resources, registered only: dashboard/api/urls.py serves every app's under `/api/v1/`."""

from rest_framework.routers import SimpleRouter

from .views import TeamSecretViewSet, TeamVolumeViewSet

router = SimpleRouter()
router.register("volumes", TeamVolumeViewSet, basename="team-volume")
router.register("secrets", TeamSecretViewSet, basename="team-secret")
