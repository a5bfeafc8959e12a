from rest_framework.routers import DefaultRouter

from .views import TeamSecretViewSet, TeamVolumeViewSet

router = DefaultRouter()
router.register("volumes", TeamVolumeViewSet, basename="team-volume")
router.register("secrets", TeamSecretViewSet, basename="team-secret")
urlpatterns = router.urls
