from rest_framework.routers import DefaultRouter

from .views import BudgetLiftViewSet, InvoiceViewSet, SpendViewSet, UsageViewSet

router = DefaultRouter()
router.register("usage", UsageViewSet, basename="usage")
router.register("invoices", InvoiceViewSet, basename="invoice")
router.register("spend", SpendViewSet, basename="spend")
router.register("budget-lifts", BudgetLiftViewSet, basename="budget-lift")
urlpatterns = router.urls
