from django.contrib import admin

from .models import Job, JobEvent, JobNotification


class JobEventInline(admin.TabularInline):
    """The job's history, as jobs.services wrote it: shown, never edited (its words' id and arguments included)."""

    model = JobEvent
    extra = 0
    can_delete = False
    fields = readonly_fields = ["at", "from_state", "to_state", "message", "actor"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Read-mostly: jobs change state only through jobs.services, never by editing the row. Never deleted here: a job
    leaves the cluster through cancel (jobs.services.cancel_job), and its record and transitions stay."""

    list_display = ["id", "name", "team", "pool", "gpus", "nodes", "state", "priority", "submitted_by", "created_at"]
    list_filter = ["state", "pool", "team", "placement"]
    search_fields = ["name", "image", "submitted_by__username"]
    list_select_related = ["team", "pool", "submitted_by"]
    inlines = [JobEventInline]
    readonly_fields = [f.name for f in Job._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(JobNotification)
class JobNotificationAdmin(admin.ModelAdmin):
    """Read-only: the e-mails about jobs, sent or not (with the mail server's last error); jobs/notifications.py."""

    list_display = ["id", "job", "kind", "created_at", "sent_at", "dropped_at", "attempts", "last_error"]
    list_filter = ["kind", ("sent_at", admin.EmptyFieldListFilter)]
    search_fields = ["job__name", "job__submitted_by__username"]
    list_select_related = ["job"]
    readonly_fields = [f.name for f in JobNotification._meta.fields]

    def has_add_permission(self, request):
        return False
