"""One filter class per model, for the API (STYLE.md, convention 7)."""

import django_filters
from django.utils.translation import gettext_lazy as _

from .choices import SecretKind, VolumeState
from .models import TeamSecret, TeamVolume


class TeamVolumeFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label=_("team (slug)"))
    state = django_filters.ChoiceFilter(choices=VolumeState.choices)

    class Meta:
        model = TeamVolume
        fields = ["team", "name", "state"]


class TeamSecretFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label=_("team (slug)"))
    kind = django_filters.ChoiceFilter(choices=SecretKind.choices)

    class Meta:
        model = TeamSecret
        fields = ["team", "name", "kind"]
