"""The identity app's API resources, registered only: dashboard/api/urls.py serves every app's under `/api/v1/`."""

from rest_framework.routers import SimpleRouter

from .views import GroupRuleViewSet

router = SimpleRouter()
router.register("group-rules", GroupRuleViewSet, basename="grouprule")
