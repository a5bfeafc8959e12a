from django.contrib import admin, messages
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal import outbox

from . import services, tasks, usage
from .models import Budget, BudgetLift, ClosedMonth, DailyUsage, Invoice, InvoiceLine, UsageInterval
from .periods import format_month


@admin.register(UsageInterval)
class UsageIntervalAdmin(admin.ModelAdmin):
    list_display = ["pod_name", "team", "pool", "gpus", "started_at", "ended_at", "node_name"]
    list_filter = ["pool", "team"]
    search_fields = ["pod_name", "pod_uid", "node_name"]
    list_select_related = ["team", "pool"]
    date_hierarchy = "started_at"

    def has_add_permission(self, request):
        return False  # recorded from the cluster's pods only (billing.usage.record_usage)

    def has_change_permission(self, request, obj=None):
        return False  # written by the cluster sync only

    def delete_model(self, request, obj):
        usage.delete_usage(intervals=UsageInterval.objects.filter(pk=obj.pk), user=request.user)

    def delete_queryset(self, request, queryset):
        usage.delete_usage(intervals=queryset, user=request.user)


class InvoiceLineInline(admin.TabularInline):
    model = InvoiceLine
    fields = ["kind", "description", "quantity", "unit", "unit_price", "amount", "adjusts_month"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Invoice)
class InvoiceAdmin(admin.ModelAdmin):
    """Invoices are written by billing services only: shown here, never saved (a closed one is frozen by the database,
    and its Save answered 500); the list's action closes the selected invoices' months."""

    list_display = ["team", "month", "status", "total", "metered_until", "closed_at"]
    list_filter = ["status", "month", "team"]
    list_select_related = ["team"]
    inlines = [InvoiceLineInline]
    actions = ["close_months"]
    readonly_fields = ["team", "month", "status", "total", "metered_until", "computed_at", "closed_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=_("Close the month of the selected invoices (freezes every team's invoice)"))
    def close_months(self, request, queryset):
        # What the close would refuse (a month not ended, an earlier month still to close) is said here and not
        # queued: refused in the worker, it would reach the worker's log only.
        now = timezone.now()
        queued = []
        for month in sorted(set(queryset.values_list("month", flat=True))):
            if (refused := services.close_refusal(month=month, now=now)) is not None:
                self.message_user(request, refused, messages.ERROR)
                continue
            outbox.send(tasks.close_month.name, format_month(month), user_id=request.user.pk)
            queued.append(month)
        if queued:
            self.message_user(
                request,
                _("Closing %(months)s: the billing queue meters and freezes them.")
                % {"months": ", ".join(format_month(m) for m in queued)},
                messages.INFO,
            )


@admin.register(ClosedMonth)
class ClosedMonthAdmin(admin.ModelAdmin):
    list_display = ["month", "closed_at", "closed_by", "needs_reconciling"]
    readonly_fields = ["month", "closed_at", "closed_by", "needs_reconciling"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(DailyUsage)
class DailyUsageAdmin(admin.ModelAdmin):
    list_display = [
        "day",
        "team",
        "pool",
        "reserved_gpu_seconds",
        "in_reservation_gpu_seconds",
        "overage_gpu_seconds",
        "spill_gpu_seconds",
    ]
    list_filter = ["pool", "team"]
    list_select_related = ["team", "pool"]
    date_hierarchy = "day"

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # Metered from the intervals: a day's rows deleted by hand would leave a complete day without them, and
        # invoices without its usage. A day is metered again through a stale mark (billing.usage).
        return False


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    """Read here; set on the team's billing page or `PUT /api/v1/spend/<team>/budget/` (audited, billing.services)."""

    list_display = ["team", "monthly_cap", "updated_by", "updated_at"]
    readonly_fields = ["team", "monthly_cap", "updated_by", "updated_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # a cap is removed where it is set, and audited there


@admin.register(BudgetLift)
class BudgetLiftAdmin(admin.ModelAdmin):
    """Read here; lifted with `POST /api/v1/budget-lifts/` (admins, audited, billing.budget.lift_budget)."""

    list_display = ["job", "month", "lifted_by", "lifted_at", "reason"]
    list_select_related = ["job", "lifted_by"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # who lifted a budget for which job stays on record
