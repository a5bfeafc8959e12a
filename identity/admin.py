from allauth.account.admin import EmailAddressAdmin as BaseEmailAddressAdmin
from allauth.account.models import EmailAddress
from allauth.socialaccount.admin import SocialAccountAdmin as BaseSocialAccountAdmin
from allauth.socialaccount.admin import SocialTokenAdmin as BaseSocialTokenAdmin
from allauth.socialaccount.models import SocialAccount, SocialToken
from django.contrib import admin
from django.db import transaction

from portal import audit
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


# allauth's own pages (imported above, so they are registered before being replaced here) write provider links and
# e-mail addresses: a provider account deleted takes its user out of the group rules (docs/sign-in.md), one pointed at
# another user would sign the provider identity in as that user. Here every write and delete is audited, and what
# ties a row to its user and provider is read only (a link is made by signing in, never by hand).
for model in (SocialAccount, SocialToken, EmailAddress):
    admin.site.unregister(model)


@admin.register(SocialAccount)
class SocialAccountAdmin(AuditedAdminMixin, BaseSocialAccountAdmin):
    readonly_fields = ["user", "provider", "uid"]

    def has_add_permission(self, request):
        return False


@admin.register(SocialToken)
class SocialTokenAdmin(AuditedAdminMixin, BaseSocialTokenAdmin):
    readonly_fields = ["app", "account"]

    def has_add_permission(self, request):
        return False


@admin.register(EmailAddress)
class EmailAddressAdmin(AuditedAdminMixin, BaseEmailAddressAdmin):
    def get_readonly_fields(self, request, obj=None):
        return ["user"] if obj is not None else []

    @transaction.atomic
    def make_verified(self, request, queryset) -> None:
        befores = {address.pk: self._snapshot(address) for address in queryset.filter(verified=False)}
        super().make_verified(request, queryset)
        for address in EmailAddress.objects.filter(pk__in=befores, verified=True):
            audit.record(
                actor=request.user,
                action=self._action(address, "update"),
                instance=address,
                before=befores[address.pk],
                after=self._snapshot(address),
            )

    make_verified.short_description = BaseEmailAddressAdmin.make_verified.short_description
