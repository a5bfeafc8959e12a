"""The jobs app's API resources, registered only: dashboard/api/urls.py serves every app's under `/api/v1/`."""

from rest_framework.routers import SimpleRouter

from .views import JobViewSet

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
