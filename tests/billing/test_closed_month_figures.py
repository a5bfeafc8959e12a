"""A closed month's page, exports and usage API show the figures its invoice was made from, whatever arrives late.

Late usage re-meters the month's days (its daily rollups change) and reaches the money as adjustment lines on a
later invoice; the closed month itself keeps the GPU-hours it was invoiced on, per pool and per day.
"""

import csv
import io
import json
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing import models, services
from billing.choices import LineKind
from billing.models import ClosedMonth, DailyUsage, Invoice
from billing.money import hours
from tests.billing.conftest import at

MARCH = at(1).date()
LATE_DAY = at(30).date()
AFTER = at(5, month=4)


@pytest.fixture
def closed_then_late(team, reservation, pod):
    """March: 4 GPU-hours of overage on the 2nd, invoiced and closed; then 6 GPU-hours of overage on the 30th
    arrive (3 GPUs over for 2 hours) and are metered in April, as an adjustment on April's draft."""
    pod(at(2, 10), at(2, 12), gpus=6)
    with time_machine.travel(at(2, month=4), tick=False):
        services.refresh_usage(now=at(2, month=4))
        services.close_month(month=MARCH, now=at(2, month=4))
    pod(at(30, 8), at(30, 10), gpus=7)
    with time_machine.travel(AFTER, tick=False):
        services.refresh_usage(now=AFTER)
    late = DailyUsage.objects.get(team=team, day=LATE_DAY)
    assert hours(late.overage_gpu_seconds) == 6  # the live rollups moved on
    adjustment = Invoice.objects.get(team=team, month=at(1, month=4).date()).lines.get(kind=LineKind.ADJUSTMENT)
    assert adjustment.amount == Decimal("108.00")


@pytest.fixture
def frozen():
    with time_machine.travel(AFTER, tick=False):
        yield


def csv_rows(client) -> list[list[str]]:
    response = client.get(reverse("billing:team_usage_csv", args=["alpha", "2026-03"]))
    return list(csv.reader(io.StringIO(response.content.decode())))


def invoiced_overage_hours(team) -> Decimal:
    return Invoice.objects.get(team=team, month=MARCH).lines.get(kind=LineKind.OVERAGE).quantity


def test_the_closed_months_json_export_matches_its_invoice(client, lead, team, closed_then_late, frozen):
    client.force_login(lead)
    data = json.loads(client.get(reverse("billing:team_usage_json", args=["alpha", "2026-03"])).content)
    assert data["status"] == "closed"
    assert data["figures"] == "as_invoiced"
    assert Decimal(data["totals"]["overage_gpu_hours"]) == invoiced_overage_hours(team) == 4
    assert Decimal(data["pools"][0]["overage_gpu_hours"]) == 4
    by_day = {row["day"]: row for row in data["daily"]}
    assert Decimal(by_day["2026-03-30"]["overage_gpu_hours"]) == 0  # the late interval is April's adjustment
    assert Decimal(data["total"]) == Decimal("39272.00")  # 39,200.00 + 72.00, as invoiced


def test_the_closed_months_csv_and_page_match_its_invoice(client, lead, team, closed_then_late, frozen):
    client.force_login(lead)
    rows = list(
        csv.reader(
            io.StringIO(client.get(reverse("billing:team_usage_csv", args=["alpha", "2026-03"])).content.decode())
        )
    )
    late = next(row for row in rows if row[2:3] == ["2026-03-30"])
    assert Decimal(late[5]) == 0
    total = next(row for row in rows if row[2:3] == ["month total"])
    assert Decimal(total[5]) == 4
    body = client.get(reverse("billing:team_billing", args=["alpha"]), {"month": "2026-03"}).content.decode()
    assert "4.00 GPU-h" in body and "10.00 GPU-h" not in body
    assert "as invoiced" in body


def test_the_usage_api_gives_the_closed_months_invoiced_figures(client, lead, team, closed_then_late, frozen):
    client.force_login(lead)
    [a800] = client.get("/api/v1/usage/alpha/", {"month": "2026-03"}).json()
    assert Decimal(a800["overage_gpu_hours"]) == 4
    # The open month's figures stay live.
    april = client.get("/api/v1/usage/alpha/", {"month": "2026-04"}).json()
    assert all(Decimal(row["overage_gpu_hours"]) == 0 for row in april)


def test_a_month_closed_before_its_figures_were_kept_says_they_are_as_metered_now(
    client, lead, team, closed_then_late, frozen
):
    models.InvoicedUsage.objects.filter(day__gte=MARCH).delete()  # as a month closed before they were kept
    ClosedMonth.objects.filter(month=MARCH).update(figures_kept=False)
    client.force_login(lead)
    data = json.loads(client.get(reverse("billing:team_usage_json", args=["alpha", "2026-03"])).content)
    assert data["figures"] == "as_metered_now"
    assert Decimal(data["totals"]["overage_gpu_hours"]) == 10
    assert Decimal(data["total"]) == Decimal("39272.00")  # the money is the invoice's all the same
    body = client.get(reverse("billing:team_billing", args=["alpha"]), {"month": "2026-03"}).content.decode()
    assert "as metered now" in body
    rows = list(
        csv.reader(
            io.StringIO(client.get(reverse("billing:team_usage_csv", args=["alpha", "2026-03"])).content.decode())
        )
    )
    assert any("as metered now" in " ".join(row) for row in rows)
