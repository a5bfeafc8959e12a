from rest_framework.routers import DefaultRouter

from .views import InvoiceViewSet, UsageViewSet

router = DefaultRouter()
router.register("usage", UsageViewSet, basename="usage")
router.register("invoices", InvoiceViewSet, basename="invoice")
urlpatterns = router.urls
