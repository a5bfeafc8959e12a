"""One filter class per model, for the jobs list page and the API alike (STYLE.md, convention 7).

Team, pool and submitter are chosen among what the requesting user may see, by slug or username, so an unknown
(or invisible) one is a clear error rather than an empty list."""

import django_filters
from django.contrib.auth import get_user_model
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from portal.api.filters import UtcDateTimeFilter
from portal.models import Team

from .choices import JobState, Placement
from .models import Job
from .selectors import users_of_visible_teams


def _teams(request):
    return Team.objects.visible_to(request.user) if request is not None else Team.objects.none()


def _pools(request):
    return Pool.objects.visible_to(request.user) if request is not None else Pool.objects.none()


def _submitters(request):
    if request is None:
        return get_user_model().objects.none()
    return users_of_visible_teams(request.user)


class JobFilterSet(django_filters.FilterSet):
    team = django_filters.ModelChoiceFilter(queryset=_teams, to_field_name="slug", label=_("team (slug)"))
    pool = django_filters.ModelChoiceFilter(queryset=_pools, to_field_name="slug", label=_("pool (slug)"))
    # No DISTINCT: the filter joins nothing, and DISTINCT over every column made the count scan slow.
    state = django_filters.MultipleChoiceFilter(
        choices=JobState.choices, distinct=False, label=_("state (repeat for several)")
    )
    submitted_by = django_filters.ModelChoiceFilter(
        queryset=_submitters, to_field_name="username", label=_("submitted by (username)")
    )
    placement = django_filters.ChoiceFilter(choices=Placement.choices)
    created_after = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Job
        fields = ["team", "pool", "state", "submitted_by", "placement", "created_after", "created_before"]
