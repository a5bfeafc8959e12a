"""The pages that gather several apps: the home overview and a lead's team page (usage against quota and
reservation, lending, quota requests, the team's data)."""

from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from billing import selectors as billing_selectors
from jobs.specs import max_grace_seconds
from pools import selectors as pool_selectors
from pools import services as pool_services
from pools.forms import LendingForm, QuotaRequestForm
from pools.models import QuotaRequest, Reservation
from portal.choices import Role
from portal.models import Team
from teamdata import selectors as teamdata_selectors

from . import selectors

ZERO_MONEY = Decimal("0.00")


@login_required
def home(request):
    return render(request, "dashboard/home.html", {"teams": selectors.teams_for_overview(request.user)})


@login_required
def team_list(request):
    teams = list(Team.objects.led_by(request.user).order_by("name"))
    if not teams:
        raise Http404("no team you lead")
    if len(teams) == 1:
        return redirect("portal:team_detail", slug=teams[0].slug)
    context = {"teams": teams}
    if request.user.is_admin:
        pending = dict(
            QuotaRequest.objects.pending().values("team_id").annotate(n=Count("id")).values_list("team_id", "n")
        )
        for team in teams:
            team.pending_quota_requests = pending.get(team.pk, 0)
        context["pending_quota_requests_total"] = sum(pending.values())
    return render(request, "dashboard/team_list.html", context)


def _team_page(
    request,
    team: Team,
    *,
    form: QuotaRequestForm | None = None,
    lending_form: LendingForm | None = None,
    status: int = 200,
):
    """The team page, with the quota request form (a fresh one, or `form` as posted with its errors) and a lending
    form per reservation the user may change (fresh, or `lending_form` as posted with its errors)."""
    user = request.user
    is_lead = team.has_member(user, roles=[Role.LEAD])
    lending = pool_selectors.team_lending(team, user)
    # What lending earned this month is money: shown to those who see the team's bill (its leads and admins).
    earned = billing_selectors.earned_this_month(team=team, now=timezone.now()) if is_lead or user.is_admin else None
    for row in lending:
        row.earned = None if earned is None else earned.get(row.reservation.pool_id, {}).get("earned", ZERO_MONEY)
        if not row.can_change:
            row.form = None
        elif lending_form is not None and lending_form.reservation.pk == row.reservation.pk:
            row.form = lending_form
        else:
            row.form = LendingForm(reservation=row.reservation)
    context = {
        "lending": lending,
        "reclaim_cap_seconds": max_grace_seconds(),
        "team": team,
        **selectors.team_usage(team, now=timezone.now()),
        **pool_selectors.team_quota_requests(team),
        "quota_request_form": (form or QuotaRequestForm(team=team, user=user)) if is_lead else None,
        **teamdata_selectors.team_data(team),
    }
    if user.is_admin:
        context["pending_quota_requests_total"] = QuotaRequest.objects.pending().count()
    return render(request, "dashboard/team_detail.html", context, status=status)


@login_required
def team_detail(request, slug: str):
    """A lead's page of their team: usage against quota and reservation, quota requests, members, and the way to
    billing."""
    team = get_object_or_404(Team.objects.led_by(request.user), slug=slug)
    return _team_page(request, team)


@login_required
@require_POST
def team_quota_request(request, slug: str):
    """A lead asks for a quota change; on an error the page comes back with the form as typed (400)."""
    team = get_object_or_404(Team.objects.led_by(request.user), slug=slug)
    form = QuotaRequestForm(request.POST, team=team, user=request.user)
    if form.is_valid():
        data = form.cleaned_data
        try:
            quota_request = pool_services.request_quota_change(
                team=team, pool=data["pool"], max_gpus=data["max_gpus"], reason=data["reason"], user=request.user
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(
                request,
                _("Your request for %(gpus)d GPUs of %(pool)s was sent to the platform admins.")
                % {"gpus": quota_request.max_gpus, "pool": quota_request.pool.name},
            )
            return redirect("portal:team_detail", slug=team.slug)
    return _team_page(request, team, form=form, status=400)


@login_required
@require_POST
def team_reservation_lending(request, slug: str, pk: int):
    """A lead chooses what a reservation of the team lends; on an error the page comes back with the form as typed
    (400)."""
    team = get_object_or_404(Team.objects.led_by(request.user), slug=slug)
    reservation = get_object_or_404(Reservation.objects.filter(team=team), pk=pk)
    form = LendingForm(request.POST, reservation=reservation)
    if form.is_valid():
        data = form.cleaned_data
        try:
            reservation = pool_services.set_lending(
                reservation=reservation,
                lending=data["lending"],
                protected_gpus=data["protected_gpus"] or 0,
                user=request.user,
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(
                request,
                _("%(pool)s: %(setting)s. Kueue has it within seconds.")
                % {"pool": reservation.pool.name, "setting": reservation.get_lending_display()},
            )
            return redirect(f"{reverse('portal:team_detail', args=[team.slug])}#lending")
    return _team_page(request, team, lending_form=form, status=400)


@login_required
@require_POST
def team_quota_request_withdraw(request, slug: str, pk: int):
    team = get_object_or_404(Team.objects.led_by(request.user), slug=slug)
    quota_request = get_object_or_404(QuotaRequest.objects.visible_to(request.user).filter(team=team), pk=pk)
    try:
        pool_services.withdraw_quota_request(request=quota_request, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, _("Request for %(pool)s withdrawn.") % {"pool": quota_request.pool.name})
    return redirect("portal:team_detail", slug=team.slug)
