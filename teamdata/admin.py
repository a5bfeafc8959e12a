"""Django admin: volumes and secrets are listed for platform admins; they are registered, rotated and removed
through the team page or the API (services), since a secret's value must go to the cluster and nowhere else."""

from django.contrib import admin

from .models import TeamSecret, TeamVolume


@admin.register(TeamVolume)
class TeamVolumeAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "team",
        "source",
        "size_gib",
        "access_mode",
        "storage_class",
        "read_only_for_researchers",
        "state",
        "state_changed_at",
    )
    list_filter = ("state", "source", "team")
    search_fields = ("name", "team__slug")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(TeamSecret)
class TeamSecretAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "kind", "keys", "version", "created_by", "rotated_by", "rotated_at")
    list_filter = ("kind", "team")
    search_fields = ("name", "team__slug")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
