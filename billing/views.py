"""Billing pages: the team lead's month view with exports and invoices, and the admin's pool view.

Scope: a lead sees the teams they lead (`Team.objects.led_by`), a platform admin every team; anything else is a
404, for pages, fragments and exports alike.
"""

import csv
import json

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.htmx import render_page_or_partial
from portal.models import Team

from . import selectors, spend
from .budget import describe, set_budget, team_budget
from .forms import BudgetForm, MonthForm
from .models import Invoice
from .periods import format_month, month_of, parse_month


def _led_team(request, slug: str) -> Team:
    return get_object_or_404(Team.objects.led_by(request.user), slug=slug)


def _month_or_404(value: str):
    month = parse_month(value)
    if month is None:
        raise Http404("no such month")
    return month


@login_required
def billing_home(request):
    team = Team.objects.led_by(request.user).order_by("name").first()
    if team is None:
        raise Http404("no team whose billing you may see")
    return redirect("billing:team_billing", slug=team.slug)


def _page_context(request, team: Team, now, *, month_query=None, budget_form=None) -> dict:
    form = MonthForm(month_query or None, months=selectors.months_for(team, now=now))
    month = form.chosen()
    return {
        "spend": _spend(team, now, budget_form=budget_form) if month == month_of(now) else None,
        "team": team,
        "teams": Team.objects.led_by(request.user).order_by("name"),
        "form": form,
        "month": month,
        "month_slug": format_month(month),
        "report": selectors.team_month(team=team, month=month, now=now),
        "closed_invoices": selectors.closed_invoices(team),
    }


@login_required
def team_billing(request, slug: str):
    team = _led_team(request, slug)
    context = _page_context(request, team, timezone.now(), month_query=request.GET)
    return render_page_or_partial(request, "billing/team_billing.html", "billing/partials/team_month.html", context)


def _spend(team: Team, now, *, budget_form=None) -> dict:
    """The current month's forecast, the budget and the reservation advice, for the page."""
    status = team_budget(team=team, now=now)
    forecast = spend.team_forecast(team=team, now=now, budget=status)
    return {
        "forecast": forecast,
        "advice": spend.team_advice(team=team, now=now),
        "budget": describe(status) if status else None,
        "budget_form": budget_form or BudgetForm(initial={"monthly_cap": status.cap if status else None}),
    }


@login_required
@require_POST
def team_budget_set(request, slug: str):
    """A lead (or an admin) sets or removes the team's monthly cap on the variable part; audited."""
    team = _led_team(request, slug)
    now = timezone.now()
    form = BudgetForm(request.POST)
    if form.is_valid():
        try:
            set_budget(team=team, monthly_cap=form.cleaned_data["monthly_cap"], user=request.user, now=now)
        except ValidationError as error:
            form.add_error(None, error)
    if form.errors:
        context = _page_context(request, team, now, budget_form=form)
        return render(request, "billing/team_billing.html", context, status=400)
    return redirect(f"{reverse('billing:team_billing', args=[team.slug])}#budget")


def _export(team: Team, month) -> dict:
    """The month as data. Codes and the invoiced text stay as they are for every reader (`kind`, `unit`, and
    `description` in English as invoiced: what finance matches on, and a closed month never changes); the
    `*_localised` fields say the same in the reader's language."""
    report = selectors.team_month(team=team, month=month, now=timezone.now())
    return {
        "team": team.slug,
        "month": format_month(month),
        "status": report.invoice.status if report.invoice else "draft",
        "metered_until": report.metered_until,
        # as_metered (open month), as_invoiced (closed: the figures its invoice was made from), as_metered_now
        # (closed before those were kept: today's rollups, which late usage may have changed since the invoice).
        "figures": report.figures,
        "units": {"figures": "GPU-hours", "utilisation": "U / R", "money": "amount in the pools' currency"},
        "totals": report.totals,
        "pools": [{**{k: v for k, v in row.items() if k != "pool"}, "pool": row["pool"].slug} for row in report.pools],
        "daily": [{**row, "day": row["day"].isoformat()} for row in report.daily],
        "lines": [
            {
                "kind": line.kind,
                "description": line.description,
                "description_localised": line.description_in_words,
                "quantity": line.quantity,
                "unit": line.unit,
                "unit_localised": line.unit_label,
                "unit_price": line.unit_price,
                "amount": line.amount,
                "adjusts_month": format_month(line.adjusts_month) if getattr(line, "adjusts_month", None) else None,
            }
            for line in report.lines
        ],
        "credits": report.credits,
        "total": report.total,
    }


@login_required
def team_usage_json(request, slug: str, month: str):
    team = _led_team(request, slug)
    data = _export(team, _month_or_404(month))
    response = HttpResponse(json.dumps(data, cls=DjangoJSONEncoder, indent=2), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{team.slug}-{data["month"]}-usage.json"'
    return response


CSV_COLUMNS = [
    "day",
    "reserved_gpu_hours",
    "in_reservation_gpu_hours",
    "overage_gpu_hours",
    "spill_gpu_hours",
    "idle_gpu_hours",
    "utilisation",
    "lent_gpu_hours",
    "borrowed_gpu_hours",
    "unreserved_gpu_hours",
]


# A closed month's CSV says where its GPU-hours come from (in English, like the CSV's codes: what finance reads).
CSV_FIGURES_NOTES = {
    selectors.AS_INVOICED: "GPU-hours as invoiced; usage that arrived after the close is on a later invoice as "
    "adjustment lines",
    selectors.AS_METERED_NOW: "per-day and per-pool GPU-hours as metered now (kept since before the close), which "
    "may include usage that arrived after it; the costs and the total are the invoice's",
}


# A spreadsheet takes a cell that starts with one of these for a formula (OWASP's "CSV injection"): a pool named
# `=HYPERLINK(...)` would run in finance's spreadsheet, from a description that starts with the pool's name (as the
# Chinese ones do).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(value):
    """A text cell as a spreadsheet shows it, never as a formula: one that starts like a formula gets a leading `'`.
    Numbers (Decimal, the figures) are written as they are, negative ones too."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


class _SpreadsheetWriter:
    def __init__(self, response):
        self._writer = csv.writer(response)

    def writerow(self, row):
        self._writer.writerow([spreadsheet_text(value) for value in row])


@login_required
def team_usage_csv(request, slug: str, month: str):
    """One row per day, then the cost lines: what a lead hands to finance. No cell is read as a formula."""
    team = _led_team(request, slug)
    data = _export(team, _month_or_404(month))
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{team.slug}-{data["month"]}-usage.csv"'
    writer = _SpreadsheetWriter(response)
    writer.writerow(["team", "month", *CSV_COLUMNS])
    for row in data["daily"]:
        writer.writerow([team.slug, data["month"], *[row[column] for column in CSV_COLUMNS]])
    writer.writerow([team.slug, data["month"], "month total", *[data["totals"][column] for column in CSV_COLUMNS[1:]]])
    writer.writerow([])
    line_columns = [
        "kind",
        "description",
        "quantity",
        "unit",
        "unit_price",
        "amount",
        "adjusts_month",
        "description_localised",
        "unit_localised",
    ]
    writer.writerow(line_columns)
    for line in data["lines"]:
        writer.writerow([line[column] if line[column] is not None else "" for column in line_columns])
    writer.writerow(["lending credits", "", "", "", "", data["credits"], "", "", ""])
    writer.writerow(["total", "", "", "", "", data["total"], "", "", ""])
    if data["figures"] in CSV_FIGURES_NOTES:
        writer.writerow(["figures", data["figures"], CSV_FIGURES_NOTES[data["figures"]]])
    return response


@login_required
def invoice_detail(request, slug: str, month: str):
    team = _led_team(request, slug)
    invoice = get_object_or_404(Invoice.objects.led_by(request.user), team=team, month=_month_or_404(month))
    return render(
        request,
        "billing/invoice_detail.html",
        {"team": team, "invoice": invoice, "lines": invoice.lines.select_related("pool")},
    )


@login_required
def pool_usage(request):
    if not request.user.is_admin:
        raise Http404("platform admins only")
    now = timezone.now()
    months = selectors.months_for_all(now=now)
    form = MonthForm(request.GET or None, months=months)
    month = form.chosen()
    context = {
        "form": form,
        "month": month,
        "pools": selectors.pool_month(month=month, now=now),
        "metered_until": selectors.metered_until(month),
    }
    return render_page_or_partial(request, "billing/pool_usage.html", "billing/partials/pool_month.html", context)
