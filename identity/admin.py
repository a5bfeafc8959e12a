from django.contrib import admin

from portal.admin import AuditedAdminMixin

from .models import GroupRule


@admin.register(GroupRule)
class GroupRuleAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Which provider group gives which team role (or platform admin); applied at every sign-in through the
    provider. Memberships show their source (by hand or from the provider) under Portal → Memberships."""

    list_display = ["group", "team", "role", "platform_admin", "created_at"]
    list_filter = ["platform_admin", "role", "team"]
    search_fields = ["group", "team__name", "team__slug"]
    list_select_related = ["team"]
