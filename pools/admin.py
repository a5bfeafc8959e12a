import copy

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext_lazy as _

from portal.admin import AuditedAdminMixin, MembershipInline, RefusedDeletionAdminMixin
from portal.models import Team

from . import quota_floor, selectors, services, teams
from .models import ContractChange, NamespaceLimits, Node, Pool, PriceChange, Quota, QuotaRequest, Reservation


@admin.register(Team)
class TeamAdmin(RefusedDeletionAdminMixin, AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["name", "slug", "namespace", "queueing_strategy", "allow_high_priority", "created_at"]
    list_filter = ["queueing_strategy", "allow_high_priority"]
    search_fields = ["name", "slug"]
    inlines = [MembershipInline]

    def get_readonly_fields(self, request, obj=None):
        return ["slug"] if obj is not None else []  # it names the namespace and queues (teams.save_team)

    def save_model(self, request, obj, form, change):
        # The service audits the team and sends the change to Kueue (its ClusterQueue's queueing order). A change
        # passes only what the form changed, applied to the row as it is now (another change meanwhile stays).
        changes = {name: getattr(obj, name) for name in form.changed_data} if change else None
        teams.save_team(team=obj, changes=changes, user=request.user)

    def deletion_refusal(self, team):
        return teams.refusal(team)  # it still holds quotas, volumes, members...: the service refuses

    def delete_model(self, request, obj):
        teams.delete_team(team=obj, user=request.user)


class ContractChangeInline(admin.TabularInline):
    """The contract's history, read only: `services.save_pool` writes it when the contract changes, and metering
    reads it (a row changed here would re-split the lending of days already invoiced)."""

    model = ContractChange
    fields = ["effective_from", "contracted_gpus", "changed_by"]
    readonly_fields = fields
    extra = 0

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class PriceChangeInline(ContractChangeInline):
    """The prices' history, read only: `services.save_pool` writes it, and billing prices each day's usage from it
    (a row changed here would re-price days already used)."""

    model = PriceChange
    fields = ["effective_from", "hourly_price_per_gpu", "lending_price_share", "changed_by", "recorded_at"]
    readonly_fields = fields


class _DryRun(Exception):
    pass


class ServiceCheckedAdminMixin:
    """What the service refuses comes back as the form's errors, with what was typed, instead of a 500: the form's
    validation runs `save_model` (the service) on a copy of the object in a savepoint that is always rolled back (its
    writes, audit entries and after-commit tasks with it). The real save follows, in the same request."""

    def get_form(self, request, obj=None, change=False, **kwargs):
        form_class = super().get_form(request, obj, change=change, **kwargs)
        model_admin = self

        class ServiceChecked(form_class):
            def _post_clean(self):
                super()._post_clean()
                if self._errors:
                    return
                probe = copy.copy(self.instance)
                probe._state = copy.copy(self.instance._state)
                try:
                    with transaction.atomic():
                        model_admin.save_model(request, probe, self, change)
                        raise _DryRun
                except _DryRun:
                    pass
                except ValidationError as error:
                    errors = error.error_dict if hasattr(error, "error_dict") else {None: error.error_list}
                    for field, messages in errors.items():
                        self.add_error(field if field in self.fields else None, messages)

        return ServiceChecked


@admin.register(Pool)
class PoolAdmin(RefusedDeletionAdminMixin, ServiceCheckedAdminMixin, admin.ModelAdmin):
    inlines = [ContractChangeInline, PriceChangeInline]
    list_display = [
        "name",
        "slug",
        "kind",
        "gpu_model",
        "contracted_gpus",
        "monthly_price_per_gpu",
        "hourly_price_per_gpu",
        "lending_price_share",
        "min_nodes",
        "max_nodes",
    ]
    list_filter = ["kind", "gpu_model"]
    search_fields = ["name", "slug", "gpu_model"]
    filter_horizontal = ["spill_pools"]

    def get_readonly_fields(self, request, obj=None):
        return ["slug"] if obj is not None else []  # it names the flavor and queue (services.save_pool)

    def get_prepopulated_fields(self, request, obj=None):
        return {} if obj is not None else {"slug": ["name"]}

    def save_model(self, request, obj, form, change):
        # The spill pools too: the service checks them (not itself) and audits them with the pool's fields. A change
        # passes only what the form changed, applied to the row as it is now (another change meanwhile stays).
        changed = form.changed_data if change else None
        changes = None if changed is None else {name: getattr(obj, name) for name in changed if name != "spill_pools"}
        spill_pools = (
            list(form.cleaned_data.get("spill_pools", [])) if changed is None or "spill_pools" in changed else None
        )
        services.save_pool(pool=obj, changes=changes, spill_pools=spill_pools, user=request.user)

    def save_related(self, request, form, formsets, change):
        form.cleaned_data.pop("spill_pools", None)  # saved by the service above
        super().save_related(request, form, formsets, change)

    def deletion_refusal(self, pool):
        return selectors.delete_refusal(pool)  # team quotas or pending quota requests: the service refuses

    def delete_model(self, request, obj):
        services.delete_pool(pool=obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for pool in queryset:
            try:
                services.delete_pool(pool=pool, user=request.user)
            except ValidationError as error:  # e.g. a quota added since the confirmation page
                self.message_user(request, " ".join(error.messages), messages.ERROR)


@admin.register(Node)
class NodeAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Read here: the rows mirror the cluster's nodes (the sync, pools.services.record_nodes), and one made or edited
    by hand would be a node the scheduler does not have (fragmentation, "can never fit"). A node gone from the cluster
    may be deleted (audited); the sync deletes it too."""

    list_display = ["name", "pool", "gpu_capacity", "gpu_allocatable", "ready", "unschedulable", "last_seen_at"]
    list_filter = ["pool", "ready"]
    search_fields = ["name"]
    list_select_related = ["pool"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReservationAdminForm(forms.ModelForm):
    class Meta:
        model = Reservation
        fields = ["team", "pool", "gpus", "starts_at", "ends_at", "monthly_price_per_gpu"]

    def clean(self):
        cleaned = super().clean()
        if self.errors or self.instance.pk:
            return cleaned
        # A preview of the contract check for a friendly message; the service repeats it under the pool lock.
        try:
            reservation = Reservation(**{k: cleaned[k] for k in self.Meta.fields})
            services._check_contract(pool=cleaned["pool"], reservation=reservation)
        except ValidationError as error:
            raise ValidationError(error.messages) from None
        return cleaned


@admin.register(Reservation)
class ReservationAdmin(ServiceCheckedAdminMixin, AuditedAdminMixin, admin.ModelAdmin):
    form = ReservationAdminForm
    list_display = ["team", "pool", "gpus", "starts_at", "ends_at", "monthly_price_per_gpu", "created_by"]
    list_filter = ["pool", "team"]
    list_select_related = ["team", "pool", "created_by"]
    date_hierarchy = "starts_at"

    def get_readonly_fields(self, request, obj=None):
        # Reservations are contracts: once made only their end moves (through the service), never the rest.
        return ["team", "pool", "gpus", "starts_at", "monthly_price_per_gpu"] if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            services.end_reservation(reservation=obj, ends_at=obj.ends_at, user=request.user)
        else:
            saved = services.create_reservation(
                team=obj.team,
                pool=obj.pool,
                gpus=obj.gpus,
                starts_at=obj.starts_at,
                ends_at=obj.ends_at,
                monthly_price_per_gpu=obj.monthly_price_per_gpu,
                user=request.user,
            )
            obj.pk = saved.pk

    def delete_model(self, request, obj):
        services.delete_reservation(reservation=obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for reservation in queryset:
            services.delete_reservation(reservation=reservation, user=request.user)


@admin.register(Quota)
class QuotaAdmin(RefusedDeletionAdminMixin, ServiceCheckedAdminMixin, AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["team", "pool", "max_gpus", "updated_at"]
    list_filter = ["pool", "team"]
    list_select_related = ["team", "pool"]

    def get_readonly_fields(self, request, obj=None):
        return ["team", "pool"] if obj else []  # another team or pool is another quota: add it

    def save_model(self, request, obj, form, change):
        saved = services.set_quota(team=obj.team, pool=obj.pool, max_gpus=obj.max_gpus, user=request.user)
        obj.pk = saved.pk

    def deletion_refusal(self, quota):
        return quota_floor.deletion_refusal(quota)  # its team's reservations or jobs still need it: the service refuses

    def delete_model(self, request, obj):
        services.delete_quota(quota=obj, user=request.user)

    def delete_queryset(self, request, queryset):
        for quota in queryset:
            services.delete_quota(quota=quota, user=request.user)


@admin.register(NamespaceLimits)
class NamespaceLimitsAdmin(ServiceCheckedAdminMixin, AuditedAdminMixin, admin.ModelAdmin):
    list_display = [
        "team",
        "requests_cpu_millicores",
        "requests_memory_mib",
        "max_pods",
        "container_max_gpus",
        "max_volumes",
        "max_volume_storage_gib",
    ]
    list_select_related = ["team"]

    def get_readonly_fields(self, request, obj=None):
        return ["team"] if obj else []  # another team's limits are another row: add it

    def save_model(self, request, obj, form, change):
        values = {name: form.cleaned_data[name] for name in form.changed_data if name != "team"}
        saved = services.set_namespace_limits(team=obj.team, user=request.user, **values)
        obj.pk = saved.pk


@admin.register(QuotaRequest)
class QuotaRequestAdmin(admin.ModelAdmin):
    """Leads' quota requests. Admins decide with the list actions, through the services (audited there); the
    requests themselves are never edited here."""

    list_display = [
        "team",
        "pool",
        "previous_max_gpus",
        "max_gpus",
        "state",
        "requested_by",
        "created_at",
        "decided_by",
        "decided_at",
    ]
    list_filter = ["state", "pool", "team"]
    list_select_related = ["team", "pool", "requested_by", "decided_by"]
    search_fields = ["team__name", "team__slug", "pool__name", "reason"]
    date_hierarchy = "created_at"
    actions = ["approve", "reject"]

    def has_add_permission(self, request) -> bool:
        return False  # leads ask on their team page or through the API

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def _decide(self, request, queryset, decide, done: str) -> None:
        decided = 0
        for quota_request in queryset.select_related("team", "pool"):
            try:
                decide(request=quota_request, user=request.user)
            except ValidationError as error:
                self.message_user(
                    request, f"{quota_request.team} · {quota_request.pool}: {' '.join(error.messages)}", messages.ERROR
                )
            else:
                decided += 1
        if decided:
            self.message_user(request, done % {"n": decided}, messages.SUCCESS)

    @admin.action(description=_("Approve the selected requests (sets the quotas)"), permissions=["view"])
    def approve(self, request, queryset):
        self._decide(request, queryset, services.approve_quota_request, _("%(n)d request(s) approved."))

    @admin.action(description=_("Reject the selected requests"), permissions=["view"])
    def reject(self, request, queryset):
        self._decide(request, queryset, services.reject_quota_request, _("%(n)d request(s) rejected."))
