"""One filter class per model, for the pool pages and the API alike (STYLE.md, convention 7)."""

import django_filters
from django.utils.translation import gettext_lazy as _

from portal.api.filters import UtcDateTimeFilter
from portal.models import Team

from .choices import PoolKind, QuotaRequestState
from .models import Node, Pool, Quota, QuotaRequest, Reservation


class PoolFilterSet(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=PoolKind.choices)
    gpu_model = django_filters.CharFilter()

    class Meta:
        model = Pool
        fields = ["kind", "gpu_model"]


class NodeFilterSet(django_filters.FilterSet):
    pool = django_filters.CharFilter(field_name="pool__slug", label=_("pool (slug)"))
    ready = django_filters.BooleanFilter()
    unschedulable = django_filters.BooleanFilter(label=_("cordoned"))

    class Meta:
        model = Node
        fields = ["pool", "ready", "unschedulable"]


class ReservationFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label=_("team (slug)"))
    pool = django_filters.CharFilter(field_name="pool__slug", label=_("pool (slug)"))
    active_at = UtcDateTimeFilter(method="filter_active_at", label=_("active at (ISO 8601)"))

    class Meta:
        model = Reservation
        fields = ["team", "pool", "active_at"]

    def filter_active_at(self, queryset, name, value):
        return queryset.active_at(value)


class QuotaFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label=_("team (slug)"))
    pool = django_filters.CharFilter(field_name="pool__slug", label=_("pool (slug)"))

    class Meta:
        model = Quota
        fields = ["team", "pool"]


class NamespaceLimitsFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="slug", label=_("team (slug)"))

    class Meta:
        model = Team
        fields = ["team"]


class QuotaRequestFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label=_("team (slug)"))
    pool = django_filters.CharFilter(field_name="pool__slug", label=_("pool (slug)"))
    state = django_filters.ChoiceFilter(choices=QuotaRequestState.choices)

    class Meta:
        model = QuotaRequest
        fields = ["team", "pool", "state"]
