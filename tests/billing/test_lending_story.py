"""A whole lending story, metered by the real SQL and invoiced, against a computation by hand.

Pool A800: 12 GPUs contracted, 18.0000 per GPU-hour, lending share 0.5 → lending price 9.0000. Alpha reserves 8
GPUs for all of March and uses 2 on March 3, 00:00-04:00. Beta (no reservation) uses 10 GPUs 00:00-04:00, Gamma
(no reservation) 3 GPUs 00:00-01:00. Alpha's lead keeps 3 GPUs protected from 02:00. Unreserved GPUs: 12 − 8 = 4.

  00-01  overage 13, lenders idle min(8 − 2, 8) = 6 → borrowed min(13 − 4, 6) = 6, shared pro rata: Beta 6×10/13 =
         60/13, Gamma 18/13 GPUs; unreserved Beta 10 − 60/13, Gamma 3 − 18/13; Alpha lends 6
  01-02  overage 10, idle 6 → borrowed 6: Beta 6 (unreserved 4); Alpha lends 6
  02-04  protect 3: lendable 5, idle min(6, 5) = 5 → borrowed 5 an hour: Beta 5 (unreserved 5); Alpha lends 5
  Alpha lent 6 + 6 + 2×5 = 22 GPU-h = 79,200 GPU-s; Beta borrowed 60/13 + 6 + 10 = 268/13 GPU-h = 74,215.384615…
  GPU-s and Gamma 18/13 GPU-h = 4,984.615384… GPU-s. Rounded to the GPU-microsecond by largest remainder (Gamma's
  .615… µs beats Beta's .384… µs for the one left): Beta 74,215.384615, Gamma 4,984.615385; Σ 79,200 = 79,200.
Money: Alpha is credited 22 × 9.0000 = 198.00; Beta pays 40 × 18 = 720.00 and Gamma 3 × 18 = 54.00 as overage.
"""

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing import selectors, services
from billing.choices import InvoiceStatus, LineKind
from billing.models import DailyUsage, Invoice
from pools import services as pool_services
from pools.choices import Lending
from pools.models import LendingChange
from tests.billing.conftest import at
from tests.factories import MembershipFactory, ReservationFactory, TeamFactory, UserFactory

MARCH = at(1).date()
APRIL = at(1, month=4).date()
HOUR = Decimal(3600)


@pytest.fixture
def story(team, lead, reserved_pool, pod):
    reserved_pool.contracted_gpus = 12
    reserved_pool.save()
    beta, gamma = TeamFactory(slug="beta", name="Beta"), TeamFactory(slug="gamma", name="Gamma")
    reservation = ReservationFactory(
        team=team, pool=reserved_pool, gpus=8, starts_at=at(1), ends_at=at(1, month=4), monthly_price_per_gpu=9800
    )
    pod(at(3, 0), at(3, 4), gpus=2)
    pod(at(3, 0), at(3, 4), gpus=10, for_team=beta)
    pod(at(3, 0), at(3, 1), gpus=3, for_team=gamma)
    pool_services.set_lending(
        reservation=reservation, lending=Lending.PROTECT, protected_gpus=3, user=lead, at=at(3, 2)
    )
    return {"alpha": team, "beta": beta, "gamma": gamma, "reservation": reservation, "pool": reserved_pool}


def refresh(now):
    with time_machine.travel(now, tick=False):
        return services.refresh_usage(now=now)


def gpu_hours(row, name):
    return getattr(row, f"{name}_gpu_seconds") / HOUR


def test_the_story_meters_to_the_hand_computation(story):
    refresh(at(5))
    day = {row.team_id: row for row in DailyUsage.objects.filter(day=at(3).date())}
    alpha, beta, gamma = (day[story[name].pk] for name in ("alpha", "beta", "gamma"))
    assert [gpu_hours(alpha, f) for f in ("in_reservation", "lent", "borrowed", "overage")] == [8, 22, 0, 0]
    assert [getattr(beta, f"{f}_gpu_seconds") for f in ("overage", "borrowed", "unreserved", "lent")] == [
        Decimal(144_000), Decimal("74215.384615"), Decimal("69784.615385"), 0
    ]  # fmt: skip
    assert [getattr(gamma, f"{f}_gpu_seconds") for f in ("overage", "borrowed", "unreserved", "lent")] == [
        Decimal(10_800), Decimal("4984.615385"), Decimal("5815.384615"), 0
    ]  # fmt: skip
    assert beta.borrowed_gpu_seconds + gamma.borrowed_gpu_seconds == alpha.lent_gpu_seconds == 79_200
    # no other day has lending
    assert not DailyUsage.objects.exclude(day=at(3).date()).filter(lent_gpu_seconds__gt=0).exists()


def test_credits_and_charges_on_the_invoices_and_frozen_at_close(story, platform_admin):
    refresh(at(5))
    alpha = Invoice.objects.get(team=story["alpha"], month=MARCH)
    credit = alpha.lines.get(kind=LineKind.LENDING_CREDIT)
    assert (credit.quantity, credit.unit_price, credit.amount) == (Decimal(22), Decimal("9.0000"), Decimal("-198.00"))
    assert credit.description == "Credit for idle reserved GPUs lent to other teams in A800 reserved"
    beta = Invoice.objects.get(team=story["beta"], month=MARCH)
    assert [(line.kind, line.amount) for line in beta.lines.all()] == [(LineKind.OVERAGE, Decimal("720.00"))]
    gamma = Invoice.objects.get(team=story["gamma"], month=MARCH)
    assert [(line.kind, line.amount) for line in gamma.lines.all()] == [(LineKind.OVERAGE, Decimal("54.00"))]
    assert selectors.reservation_earned_this_month(reservation=story["reservation"], now=at(5)) == Decimal("198.00")

    services.close_month(month=MARCH, now=at(2, month=4), user=platform_admin)
    alpha.refresh_from_db()
    assert alpha.status == InvoiceStatus.CLOSED
    assert alpha.total == Decimal("78400.00") - Decimal("198.00")
    frozen = sorted(alpha.lines.values_list("kind", "quantity", "unit_price", "amount"))

    # Later, the admin raises the lending share and a late correction says Alpha lent nothing 01:00-02:00: the
    # closed month stays as invoiced; the difference goes onto April's draft as an adjustment at March's price.
    story["pool"].lending_price_share = Decimal("0.75")
    story["pool"].save()
    pool_services.set_lending(reservation=story["reservation"], lending=Lending.NONE, at=at(3, 1))
    refresh(at(3, month=4))
    alpha.refresh_from_db()
    assert sorted(alpha.lines.values_list("kind", "quantity", "unit_price", "amount")) == frozen
    assert alpha.total == Decimal("78400.00") - Decimal("198.00")
    april = Invoice.objects.get(team=story["alpha"], month=APRIL)
    correction = april.lines.get(adjusts_month=MARCH, key=f"lending_credit:pool:{story['pool'].pk}")
    assert (correction.quantity, correction.unit_price, correction.amount) == (
        Decimal(-6),
        Decimal("9.0000"),
        Decimal("54.00"),
    )
    # Beta still pays all its overage: only who served it changed (6 more GPU-hours from unreserved GPUs)
    assert not Invoice.objects.filter(team=story["beta"], month=APRIL, lines__adjusts_month=MARCH).exists()


def test_exports_and_api_show_lent_borrowed_and_credits(story, client, lead):
    refresh(at(5))
    beta_lead = MembershipFactory(team=story["beta"], role="lead", user=UserFactory(username="bea")).user
    with time_machine.travel(at(5), tick=False):
        client.force_login(lead)
        data = json.loads(client.get(reverse("billing:team_usage_json", args=["alpha", "2026-03"])).content)
        assert Decimal(data["totals"]["lent_gpu_hours"]) == 22
        assert Decimal(data["credits"]) == Decimal("198.00")
        body = client.get(reverse("billing:team_usage_csv", args=["alpha", "2026-03"])).content.decode()
        rows = list(csv.reader(io.StringIO(body)))
        header = rows[0]
        march_3 = next(row for row in rows if row[2] == "2026-03-03")
        assert Decimal(march_3[header.index("lent_gpu_hours")]) == 22
        assert ["lending credits", "", "", "", "", "198.00", "", "", ""] in rows
        api = client.get("/api/v1/usage/alpha/", {"month": "2026-03"}).json()
        assert [(r["lent_gpu_hours"], r["lending_credit"]) for r in api] == [("22.000000", "198.00")]
        page = client.get(reverse("billing:team_billing", args=["alpha"]), {"month": "2026-03"}).content.decode()
        assert "Earned by lending" in page and "198.00" in page

        client.force_login(beta_lead)
        api = client.get("/api/v1/usage/beta/", {"month": "2026-03"}).json()
        assert [(r["borrowed_gpu_hours"], r["unreserved_gpu_hours"], r["overage_gpu_hours"]) for r in api] == [
            ("20.615385", "19.384615", "40.000000")
        ]


def test_the_admins_pool_view_shows_lent_borrowed_and_credits(story, client, platform_admin):
    refresh(at(5))
    with time_machine.travel(at(5), tick=False):
        [row] = [r for r in selectors.pool_month(month=MARCH, now=at(5)) if r["pool"] == story["pool"]]
        assert (row["lent_gpu_hours"], row["borrowed_gpu_hours"]) == (22, 22)  # Beta 21 + Gamma 1
        assert (row["lending_price"], row["lending_credits"]) == (Decimal("9.0000"), Decimal("198.00"))
        teams = {team["team"].slug: team for team in row["teams"]}
        assert teams["alpha"]["lending_credit"] == Decimal("198.00") and teams["beta"]["lending_credit"] is None
        assert teams["beta"]["borrowed_gpu_hours"] + teams["gamma"]["borrowed_gpu_hours"] == 22
        assert (teams["beta"]["borrowed_gpu_hours"], teams["gamma"]["borrowed_gpu_hours"]) == (
            Decimal("20.615385"), Decimal("1.384615")
        )  # fmt: skip
        client.force_login(platform_admin)
        page = client.get(reverse("billing:pool_usage"), {"month": "2026-03"}).content.decode()
    assert "Lent to other teams" in page and "22.00 GPU-h" in page and "198.00" in page and "9.0000" in page


def test_the_pool_view_of_a_closed_month_shows_the_credits_invoiced_whatever_the_price_now(story, client, lead):
    """March is closed with Alpha's credit at 9.0000 a GPU-hour (198.00); in April the pool's lending share is
    halved. March's pool view, like Alpha's invoice and the usage API, still says 198.00 at 9.0000; April's open
    month is priced at today's share."""
    refresh(at(5))
    services.close_month(month=MARCH, now=at(2, month=4))
    with time_machine.travel(at(3, month=4), tick=False):
        story["pool"].lending_price_share = Decimal("0.25")
        pool_services.save_pool(pool=story["pool"])
    [row] = [r for r in selectors.pool_month(month=MARCH, now=at(5, month=4)) if r["pool"] == story["pool"]]
    [alpha] = [team for team in row["teams"] if team["team"] == story["alpha"]]
    assert (alpha["lending_credit"], row["lending_credits"], row["lending_price"]) == (
        Decimal("198.00"), Decimal("198.00"), Decimal("9.0000")
    )  # fmt: skip
    [april] = [r for r in selectors.pool_month(month=APRIL, now=at(5, month=4)) if r["pool"] == story["pool"]]
    assert april["lending_price"] == Decimal("4.5000")


def test_a_lending_share_changed_after_the_lending_keeps_its_credit(story):
    """Alpha lent on March 3rd at 9.0000 a GPU-hour; on March 4th the share is halved (from March 5th). March's
    draft, the pool view and what Alpha earned this month still credit 22 GPU-hours at 9.0000: 198.00."""
    with time_machine.travel(at(4, 12), tick=False):
        story["pool"].lending_price_share = Decimal("0.25")
        pool_services.save_pool(pool=story["pool"])
    refresh(at(6))
    credit = Invoice.objects.get(team=story["alpha"], month=MARCH).lines.get(kind=LineKind.LENDING_CREDIT)
    assert (credit.unit_price, credit.amount) == (Decimal("9.0000"), Decimal("-198.00"))
    [row] = [r for r in selectors.pool_month(month=MARCH, now=at(6)) if r["pool"] == story["pool"]]
    assert row["lending_credits"] == Decimal("198.00") and row["lending_price"] == Decimal("4.5000")  # today's
    earned = selectors.earned_this_month(team=story["alpha"], now=at(6))[story["pool"].pk]
    assert (earned["earned"], earned["lending_price"]) == (Decimal("198.00"), Decimal("4.5000"))


def test_lending_none_lends_nothing_and_the_borrower_pays_the_same(story):
    # from March 1 until the protect change at 02:00, and, written after it at the same instant, from 02:00 on
    LendingChange.objects.create(reservation=story["reservation"], lending=Lending.NONE, effective_from=at(1))
    LendingChange.objects.create(reservation=story["reservation"], lending=Lending.NONE, effective_from=at(3, 2))
    refresh(at(5) + timedelta(hours=1))
    day = {row.team_id: row for row in DailyUsage.objects.filter(day=at(3).date())}
    assert gpu_hours(day[story["alpha"].pk], "lent") == 0
    assert gpu_hours(day[story["beta"].pk], "borrowed") == 0
    assert gpu_hours(day[story["beta"].pk], "overage") == 40
    assert not Invoice.objects.get(team=story["alpha"], month=MARCH).lines.filter(kind=LineKind.LENDING_CREDIT)
