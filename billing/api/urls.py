"""The billing app's API resources, registered only: dashboard/api/urls.py serves every app's under `/api/v1/`."""

from rest_framework.routers import SimpleRouter

from .views import BudgetLiftViewSet, InvoiceViewSet, SpendViewSet, UsageViewSet

router = SimpleRouter()
router.register("usage", UsageViewSet, basename="usage")
router.register("invoices", InvoiceViewSet, basename="invoice")
router.register("spend", SpendViewSet, basename="spend")
router.register("budget-lifts", BudgetLiftViewSet, basename="budget-lift")
