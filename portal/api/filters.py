"""Filters of the portal's API lists (teams, memberships, tokens, audit entries)."""

import django_filters

from ..choices import Role
from ..models import ApiToken, AuditEntry, Membership, Team


class TeamFilterSet(django_filters.FilterSet):
    member = django_filters.CharFilter(field_name="memberships__user__username", label="member (username)")
    q = django_filters.CharFilter(method="search", label="name or slug contains")

    class Meta:
        model = Team
        fields = ["slug", "member"]

    def search(self, queryset, name, value):
        from django.db.models import Q

        return queryset.filter(Q(name__icontains=value) | Q(slug__icontains=value))


class MembershipFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label="team (slug)")
    user = django_filters.CharFilter(field_name="user__username", label="user (username)")
    role = django_filters.ChoiceFilter(choices=Role.choices)

    class Meta:
        model = Membership
        fields = ["team", "user", "role"]


class ApiTokenFilterSet(django_filters.FilterSet):
    user = django_filters.CharFilter(field_name="user__username", label="user (username)")
    active = django_filters.BooleanFilter(method="filter_active", label="active (not revoked nor expired)")

    class Meta:
        model = ApiToken
        fields = ["user", "active"]

    def filter_active(self, queryset, name, value):
        active = ApiToken.objects.active()
        return queryset.filter(pk__in=active) if value else queryset.exclude(pk__in=active)


class AuditEntryFilterSet(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor__username", label="actor (username)")
    action = django_filters.CharFilter(field_name="action")
    action_prefix = django_filters.CharFilter(field_name="action", lookup_expr="startswith", label="action starts with")
    object_type = django_filters.CharFilter(field_name="object_type", label="object type, e.g. pools.quota")
    object_id = django_filters.CharFilter(field_name="object_id")
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields = ["actor", "action", "action_prefix", "object_type", "object_id", "since", "until"]
