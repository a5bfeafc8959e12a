"""Read-only billing API: monthly usage from the rollups and invoices, scoped to the teams a user leads."""

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from jobs.models import Job
from portal.models import Team

from .. import selectors, spend
from ..budget import as_data as budget_data
from ..budget import lift_budget, set_budget, team_budget
from ..choices import InvoiceStatus
from ..models import BudgetLift, Invoice
from ..money import as_text
from ..periods import month_of, parse_month
from .serializers import BudgetLiftSerializer, BudgetSerializer, InvoiceSerializer, UsageSerializer

MONTH_PARAMETER = OpenApiParameter(
    "month",
    OpenApiTypes.STR,
    description=gettext_lazy("YYYY-MM (UTC); default: the current month"),
    pattern=r"^\d{4}-\d{2}$",
)


def _month(request):
    value = request.query_params.get("month")
    if value is None:
        return month_of(timezone.now())
    month = parse_month(value)
    if month is None:
        raise Http404("month must be YYYY-MM")
    return month


class UsageViewSet(viewsets.ViewSet):
    api_description = gettext_lazy(
        "GPU-hours reserved, used in the reservation, overage, spill and idle, per team and pool and month."
    )

    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9-]+"

    @extend_schema(operation_id="usage_list", parameters=[MONTH_PARAMETER], responses=UsageSerializer(many=True))
    def list(self, request):
        teams = Team.objects.led_by(request.user)
        rows = selectors.usage_rows(teams=teams, month=_month(request))
        return Response(UsageSerializer(rows, many=True).data)

    @extend_schema(operation_id="usage_team_list", parameters=[MONTH_PARAMETER], responses=UsageSerializer(many=True))
    def retrieve(self, request, slug=None):
        team = get_object_or_404(Team.objects.led_by(request.user), slug=slug)
        rows = selectors.usage_rows(teams=[team], month=_month(request))
        return Response(UsageSerializer(rows, many=True).data)


class InvoiceFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    status = django_filters.ChoiceFilter(choices=InvoiceStatus.choices)
    month = django_filters.DateFilter(field_name="month", input_formats=["%Y-%m"])

    class Meta:
        model = Invoice
        fields = ["team", "status", "month"]


class InvoiceViewSet(viewsets.ReadOnlyModelViewSet):
    api_description = gettext_lazy(
        "Invoices (drafts of open months and closed ones) of the teams the user leads, with their lines."
    )

    serializer_class = InvoiceSerializer
    filterset_class = InvoiceFilter
    ordering_fields = ["month", "total"]

    def get_queryset(self):
        return (
            Invoice.objects.led_by(self.request.user)
            .select_related("team")
            .prefetch_related("lines__pool")
            .order_by("-month", "team__slug")
        )


class SpendViewSet(viewsets.ViewSet):
    api_description = gettext_lazy(
        "The current month's forecast bill with its 80-percent interval, and the reservation size that would have cost "
        "least over the last whole months, per team the user leads."
    )

    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9-]+"

    @extend_schema(operation_id="spend_retrieve", responses=OpenApiTypes.OBJECT)
    def retrieve(self, request, slug=None):
        team = get_object_or_404(Team.objects.led_by(request.user), slug=slug)
        now = timezone.now()
        status = team_budget(team=team, now=now)
        forecast = spend.team_forecast(team=team, now=now, budget=status)
        data = spend.as_data(forecast, spend.team_advice(team=team, now=now))
        return Response({"team": team.slug, **data, "budget": budget_data(status)})

    @extend_schema(operation_id="spend_budget_set", request=BudgetSerializer, responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["put"])
    def budget(self, request, slug=None):
        """Set the team's monthly cap on the variable part (`null` removes it); a lead or an admin, audited. Once the
        month's spend reached it, only an admin may raise or remove it."""
        team = get_object_or_404(Team.objects.led_by(request.user), slug=slug)
        serializer = BudgetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            set_budget(
                team=team, monthly_cap=serializer.validated_data["monthly_cap"], user=request.user, now=timezone.now()
            )
        except DjangoValidationError as error:
            raise ValidationError(error.messages) from error
        status = team_budget(team=team, now=timezone.now())
        return Response({"team": team.slug, "monthly_cap": as_text(status.cap) if status else None})


class BudgetLiftViewSet(viewsets.GenericViewSet, mixins.CreateModelMixin):
    api_description = gettext_lazy(
        "Platform admins let one job pass its team's budget for the rest of the month (audited)."
    )

    serializer_class = BudgetLiftSerializer

    def get_queryset(self):
        return BudgetLift.objects.none()

    def create(self, request):
        if not request.user.is_admin:
            raise Http404("platform admins only")
        serializer = BudgetLiftSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = get_object_or_404(Job, pk=serializer.validated_data["job"])
        lift = lift_budget(
            job=job, user=request.user, now=timezone.now(), reason=serializer.validated_data.get("reason", "")
        )
        return Response({"job": job.pk, "month": f"{lift.month:%Y-%m}", "reason": lift.reason}, status=201)
