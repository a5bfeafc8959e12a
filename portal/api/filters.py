"""Filters of the portal's API lists (teams, memberships, tokens, audit entries)."""

from datetime import UTC

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

from ..choices import Role
from ..models import ApiToken, AuditEntry, Membership, Team


class UtcDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 moment, converted to UTC: PostgreSQL refuses offsets beyond ±15:59 that ISO 8601 allows."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None or moment.tzinfo is None:
            return moment
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(_("That moment is out of range.")) from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class TeamFilterSet(django_filters.FilterSet):
    member = django_filters.CharFilter(field_name="memberships__user__username", label=_("member (username)"))
    q = django_filters.CharFilter(method="search", label=_("name or slug contains"))

    class Meta:
        model = Team
        fields = ["slug", "member"]

    def search(self, queryset, name, value):
        from django.db.models import Q

        return queryset.filter(Q(name__icontains=value) | Q(slug__icontains=value))


class MembershipFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label=_("team (slug)"))
    user = django_filters.CharFilter(field_name="user__username", label=_("user (username)"))
    role = django_filters.ChoiceFilter(choices=Role.choices)

    class Meta:
        model = Membership
        fields = ["team", "user", "role"]


class ApiTokenFilterSet(django_filters.FilterSet):
    user = django_filters.CharFilter(field_name="user__username", label=_("user (username)"))
    active = django_filters.BooleanFilter(method="filter_active", label=_("active (not revoked nor expired)"))

    class Meta:
        model = ApiToken
        fields = ["user", "active"]

    def filter_active(self, queryset, name, value):
        active = ApiToken.objects.active()
        return queryset.filter(pk__in=active) if value else queryset.exclude(pk__in=active)


class AuditEntryFilterSet(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor_username", label=_("actor (username)"))
    action = django_filters.CharFilter(field_name="action")
    action_prefix = django_filters.CharFilter(
        field_name="action", lookup_expr="startswith", label=_("action starts with")
    )
    object_type = django_filters.CharFilter(field_name="object_type", label=_("object type, e.g. pools.quota"))
    object_id = django_filters.CharFilter(field_name="object_id")
    since = UtcDateTimeFilter(field_name="at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields = ["actor", "action", "action_prefix", "object_type", "object_id", "since", "until"]
