"""Alerts, read-only: what a user sees is what `Alert.objects.visible_to` lets through (others answer 404)."""

import django_filters
from django.utils.translation import gettext_lazy
from rest_framework import viewsets

from ..choices import AlertKind, AlertState, Severity
from ..models import Alert
from .serializers import AlertSerializer


class AlertFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=AlertState.choices)
    kind = django_filters.MultipleChoiceFilter(choices=AlertKind.choices)
    severity = django_filters.ChoiceFilter(choices=Severity.choices)
    pool = django_filters.CharFilter(field_name="pool__slug")
    team = django_filters.CharFilter(field_name="team__slug")
    # A plain number: a job one may not see answers like one that does not exist (an empty list), never 400.
    job = django_filters.NumberFilter(field_name="job_id")

    class Meta:
        model = Alert
        fields = ["state", "kind", "severity", "pool", "team", "job"]


class AlertViewSet(viewsets.ReadOnlyModelViewSet):
    api_description = gettext_lazy(
        "Alerts the caller may see: those of their teams' pools, jobs and GPUs, and those of no team; firing, "
        "pending and resolved. `kind` and `subject_key` are codes; `subject` and `summary` are in the reader's "
        "language."
    )
    serializer_class = AlertSerializer
    filterset_class = AlertFilterSet
    ordering_fields = ["fired_at", "active_since", "resolved_at", "value"]

    def get_queryset(self):
        return (
            Alert.objects.visible_to(self.request.user).select_related("pool", "team").order_by("-active_since", "-id")
        )
