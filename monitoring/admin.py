"""Admins edit alert thresholds here: the default row of each kind, and overrides for a pool or a team."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from . import services
from .models import Alert, AlertNotification, AlertRule, GpuReading, JobUtilisation, TelemetryRun


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ["kind", "pool", "team", "threshold", "for_seconds", "severity", "enabled", "updated_at"]
    list_filter = ["kind", "enabled", "severity"]
    list_select_related = ["pool", "team"]
    fields = ["kind", "pool", "team", "threshold", "for_seconds", "severity", "enabled"]

    def get_readonly_fields(self, request, obj=None):
        return ["kind", "pool", "team"] if obj else []  # another kind, pool or team is another rule: add it

    def save_model(self, request, obj, form, change):
        # Through the service, so that every change is audited like the API's.
        saved = services.set_rule(
            kind=obj.kind,
            threshold=obj.threshold,
            for_seconds=obj.for_seconds,
            pool=obj.pool,
            team=obj.team,
            severity=obj.severity,
            enabled=obj.enabled,
            user=request.user,
        )
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        services.delete_rule(rule=obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for rule in queryset:
            services.delete_rule(rule=rule, user=request.user)


class AlertNotificationInline(admin.TabularInline):
    model = AlertNotification
    extra = 0
    can_delete = False
    readonly_fields = ["event", "status", "attempts", "response_status", "last_error", "created_at", "sent_at"]


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = [
        "kind",
        "subject_text",
        "state",
        "severity",
        "value",
        "threshold",
        "active_since",
        "fired_at",
        "resolved_at",
    ]
    list_filter = ["state", "kind", "severity"]
    search_fields = ["subject", "subject_key", "summary"]  # the English texts
    list_select_related = ["pool", "team"]
    inlines = [AlertNotificationInline]
    exclude = ["subject_id", "subject_args", "summary_id", "summary_args"]

    @admin.display(description=_("subject"), ordering="subject")
    def subject_text(self, alert):
        return alert.subject_in_words

    def has_change_permission(self, request, obj=None):
        return False  # alerts are written by evaluation only

    def has_add_permission(self, request):
        return False


class CollectedAdmin(admin.ModelAdmin):
    """Telemetry as collected from Prometheus (monitoring.services): read here, never made or edited by hand, which
    would invent the readings that utilisation figures and idle-GPU alerts come from. Old rows may be deleted."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(GpuReading)
class GpuReadingAdmin(CollectedAdmin):
    list_display = ["node_name", "gpu", "pool", "team", "job", "util_percent", "temperature_c", "at"]
    list_filter = ["pool"]
    search_fields = ["node_name", "pod_name"]


@admin.register(JobUtilisation)
class JobUtilisationAdmin(CollectedAdmin):
    list_display = ["job", "gpus", "last_util", "samples", "idle_since", "last_at"]


@admin.register(TelemetryRun)
class TelemetryRunAdmin(CollectedAdmin):
    list_display = ["at", "ok", "gpus", "duration_ms", "error"]
    list_filter = ["ok"]
