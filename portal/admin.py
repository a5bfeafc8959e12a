from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.widgets import AutocompleteSelect
from django.contrib.auth.admin import GroupAdmin as BaseGroupAdmin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils.translation import gettext_lazy as _

from . import audit, services
from .models import ApiToken, AuditEntry, Membership, OutboxMessage, User


class AuditedAdminMixin:
    """Writes made in Django admin leave the same audit entries as writes through the services: who, what,
    before and after. (ModelAdmins whose save_model calls a service keep that service's entry.) The many-to-many
    relations named in `audited_relations` (e.g. a user's groups and permissions) are in before and after too: the
    form saves them after the row, so the entry is written once they are saved (save_related)."""

    audited_relations: tuple[str, ...] = ()

    def _action(self, obj, verb: str) -> str:
        return f"{obj._meta.model_name}.{verb}"

    def _snapshot(self, obj) -> dict | None:
        return audit.snapshot(obj, relations=self.audited_relations)

    def save_model(self, request, obj, form, change):
        before = self._snapshot(type(obj)._default_manager.filter(pk=obj.pk).first()) if change and obj.pk else None
        super().save_model(request, obj, form, change)
        obj._audited_save = ("update" if change else "create", before)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        obj = form.instance
        if (pending := obj.__dict__.pop("_audited_save", None)) is not None:
            verb, before = pending
            audit.record(
                actor=request.user,
                action=self._action(obj, verb),
                instance=obj,
                before=before,
                after=self._snapshot(obj),
            )

    def delete_model(self, request, obj):
        before, pk = self._snapshot(obj), obj.pk
        super().delete_model(request, obj)
        obj.pk = pk
        audit.record(actor=request.user, action=self._action(obj, "delete"), instance=obj, before=before, after=None)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)

    def save_formset(self, request, form, formset, change):
        saved = {id(f.instance): (f.instance.pk, audit.snapshot(f.instance)) for f in formset.forms if f.instance.pk}
        befores = {
            pk: audit.snapshot(type(f.instance)._default_manager.filter(pk=pk).first())
            for f in formset.forms
            if (pk := f.instance.pk)
        }
        super().save_formset(request, form, formset, change)
        for obj in formset.new_objects:
            audit.record(
                actor=request.user,
                action=self._action(obj, "create"),
                instance=obj,
                before=None,
                after=audit.snapshot(obj),
            )
        for obj, _fields in formset.changed_objects:
            audit.record(
                actor=request.user,
                action=self._action(obj, "update"),
                instance=obj,
                before=befores.get(obj.pk),
                after=audit.snapshot(obj),
            )
        for obj in formset.deleted_objects:
            pk, before = saved.get(id(obj), (obj.pk, None))
            obj.pk = pk
            audit.record(
                actor=request.user, action=self._action(obj, "delete"), instance=obj, before=before, after=None
            )


class RefusedDeletionAdminMixin:
    """A row its service refuses to delete: Django's delete page (of one row, or of several in bulk) names why among
    the objects that protect it and deletes nothing, instead of listing what would go with it and then failing on the
    service's refusal. A model admin says why in `deletion_refusal` (None: it may go)."""

    def deletion_refusal(self, obj) -> str | None:
        raise NotImplementedError

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        held = [refused for obj in objs if (refused := self.deletion_refusal(obj))]
        return deleted, counts, perms_needed, [*protected, *held]


class _IdAutocompleteSelect(AutocompleteSelect):
    """Django's autocomplete redraws a refused form by filtering the users on the posted values as they are: a value
    that is not an id (a crafted POST; the browser sends ids) raised ValueError there and answered 500. Such a value
    is left out of the redrawn choices; the field itself still refuses it with its message."""

    def optgroups(self, name, value, attr=None):
        return super().optgroups(name, [v for v in value if str(v).isdigit()], attr)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]
    readonly_fields = ["source"]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs["widget"] = _IdAutocompleteSelect(db_field, self.admin_site, using=kwargs.get("using"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(User)
class UserAdmin(RefusedDeletionAdminMixin, AuditedAdminMixin, BaseUserAdmin):
    list_display = ["username", "email", "is_platform_admin", "is_break_glass", "is_staff", "language", "last_login"]
    list_filter = ["is_platform_admin", "is_break_glass", "is_staff", "is_active"]
    audited_relations = ("groups", "user_permissions")  # Django admin's own rights (a staff operator's)
    fieldsets = [
        *BaseUserAdmin.fieldsets,
        (_("Reservoir"), {"fields": ["is_platform_admin", "is_break_glass", "language", "notify_default"]}),
    ]

    def get_deleted_objects(self, objs, request):
        # The user's tokens are revoked first (delete_model), so the tokens' own refusal of deletion in admin does not
        # stand in the way.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed = {name for name in perms_needed if str(name) != str(ApiToken._meta.verbose_name)}
        return deleted, counts, perms_needed, protected

    def deletion_refusal(self, user: User) -> str | None:
        # A user still in a team is refused, saying why, as a team that still has members is (pools/teams.py): the
        # memberships would go with the user unaudited.
        teams = sorted(Membership.objects.of(user).values_list("team__name", flat=True))
        if not teams:
            return None
        return _(
            "%(user)s is still a member of %(teams)s: remove each membership first (each is removed and audited on its "
            "own), or deactivate the user instead (untick Active): that cuts them and their API tokens off at once and "
            "keeps the record."
        ) % {"user": user.get_username(), "teams": ", ".join(teams)}

    @transaction.atomic
    def delete_model(self, request, obj):
        for token in obj.api_tokens.all():
            services.revoke_token(token=token, user=request.user)
        super().delete_model(request, obj)

    def user_change_password(self, request, id, form_url=""):
        # Django's password page saves its form itself, never through save_model: a password set there (the
        # break-glass way of docs/sign-in.md) is audited here, in the same transaction, saying only that it changed.
        with transaction.atomic():
            user = self.get_object(request, unquote(id))
            answer = super().user_change_password(request, id, form_url)
            changed = type(user)._default_manager.filter(pk=user.pk).first() if user is not None else None
            if changed is not None and changed.password != user.password:
                after = {
                    **audit.snapshot(changed),
                    "password": "(changed)" if changed.has_usable_password() else "(disabled)",
                }
                audit.record(
                    actor=request.user,
                    action="user.set_password",
                    instance=changed,
                    before=audit.snapshot(user),
                    after=after,
                )
        return answer


admin.site.unregister(Group)


@admin.register(Group)
class GroupAdmin(AuditedAdminMixin, BaseGroupAdmin):
    """Django's groups: the Django admin rights a group gives its users (audited with who is in it)."""

    audited_relations = ("permissions", "user_set")


@admin.register(Membership)
class MembershipAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["user", "team", "role", "source"]
    list_filter = ["role", "source", "team"]
    search_fields = ["user__username", "team__name"]
    list_select_related = ["user", "team"]


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["at", "actor_username", "action", "object_type", "object_repr"]
    list_filter = ["action", "object_type"]
    search_fields = ["object_repr", "actor_username"]
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made through the API (the secret is shown once there); here admins see and revoke them. A token is
    revoked, never deleted: the revocation is audited and the row says who cut the token off and when."""

    list_display = ["name", "user", "prefix", "created_by", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "prefix"]
    list_select_related = ["user", "created_by"]
    readonly_fields = [f.name for f in ApiToken._meta.fields if f.name != "key_hash"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=_("Revoke the selected tokens"))
    def revoke(self, request, queryset):
        for token in queryset:
            services.revoke_token(token=token, user=request.user)


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):
    """Task messages committed with their change (portal/outbox.py): pending ones wait for the broker; a message
    refused MAX_ATTEMPTS times (e.g. a task that no longer exists) stays pending with its error for an admin."""

    list_display = ["id", "task", "args", "created_at", "sent_at", "attempts", "last_error"]
    list_filter = [("sent_at", admin.EmptyFieldListFilter), "task"]
    readonly_fields = [f.name for f in OutboxMessage._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
