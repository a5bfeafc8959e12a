from rest_framework.routers import DefaultRouter

from .views import GroupRuleViewSet

router = DefaultRouter()
router.register("group-rules", GroupRuleViewSet, basename="grouprule")
urlpatterns = router.urls
