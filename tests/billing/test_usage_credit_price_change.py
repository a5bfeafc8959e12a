"""A lending price that changes mid-month gives the month two lending-credit lines for one pool (one per stretch of
days at one price). Leads saw only one of them as the usage API's `lending_credit` (45.00 where the invoice credits
90.00 + 45.00), and admins saw the same in a closed month's pool view. Both now show the lines' sum, and the pool view
names the lending price of the month's last stretch."""

from decimal import Decimal

import pytest
import time_machine

from billing import selectors, services
from billing.choices import LineKind
from billing.models import InvoiceLine
from pools import services as pool_services
from tests.billing.conftest import at
from tests.factories import ReservationFactory, TeamFactory

MARCH = at(1).date()


def refresh(now):
    with time_machine.travel(now, tick=False):
        return services.refresh_usage(now=now)


@pytest.fixture
def lent_at_two_prices(team, reserved_pool, pod):
    """Alpha reserves all 4 contracted GPUs of the pool (18.00/GPU-h, lending share 0.5 → 9.00) and lends them idle.
    Beta borrows 2 GPUs for 5 h on March 3 (10 GPU-h at 9.00 = 90.00) and on March 12 (10 GPU-h at 4.50 = 45.00:
    the share was halved on March 10, from March 11)."""
    reserved_pool.contracted_gpus = 4
    reserved_pool.lending_price_share = Decimal("0.5")
    reserved_pool.save()
    beta = TeamFactory(slug="beta", name="Beta")
    ReservationFactory(
        team=team, pool=reserved_pool, gpus=4, starts_at=at(1), ends_at=at(1, month=4), monthly_price_per_gpu=9800
    )
    pod(at(3, 0), at(3, 5), gpus=2, for_team=beta)
    with time_machine.travel(at(10, 12), tick=False):
        reserved_pool.lending_price_share = Decimal("0.25")
        pool_services.save_pool(pool=reserved_pool)
    pod(at(12, 0), at(12, 5), gpus=2, for_team=beta)
    refresh(at(13))
    return reserved_pool


def test_the_usage_api_credits_every_stretch_of_the_month(client, team, lead, lent_at_two_prices):
    credit_lines = InvoiceLine.objects.filter(invoice__team=team, invoice__month=MARCH, kind=LineKind.LENDING_CREDIT)
    assert sorted(line.amount for line in credit_lines) == [Decimal("-90.00"), Decimal("-45.00")]  # the invoice
    client.force_login(lead)
    with time_machine.travel(at(13, 1), tick=False):
        rows = client.get("/api/v1/usage/alpha/", {"month": "2026-03"}).json()
    [row] = [row for row in rows if row["pool"] == lent_at_two_prices.slug]
    assert Decimal(row["lending_credit"]) == Decimal("135.00")


def test_the_admin_pool_view_of_a_closed_month_credits_every_stretch(team, lent_at_two_prices):
    refresh(at(2, month=4))
    with time_machine.travel(at(2, 1, month=4), tick=False):
        services.close_month(month=MARCH, now=at(2, 1, month=4))
        report = selectors.pool_month(month=MARCH, now=at(2, 1, month=4))
    [pool_row] = [row for row in report if row["pool"] == lent_at_two_prices]
    [alpha] = [row for row in pool_row["teams"] if row["team"] == team]
    assert alpha["lending_credit"] == Decimal("135.00")
    assert pool_row["lending_credits"] == Decimal("135.00")
    assert pool_row["lending_price"] == Decimal("4.5000")  # the price from March 11 on, as its line was invoiced
