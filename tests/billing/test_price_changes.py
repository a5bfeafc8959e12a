"""A pool's price changes from the next UTC midnight and never re-prices what was used before it: a month whose
prices changed is invoiced one line per stretch of days at one price, and the budget, the forecast, the credits and
the adjustments after the close all count each day at its own prices."""

from decimal import Decimal

import pytest
import time_machine

from billing import budget, prices, services, spend
from billing.choices import LineKind
from billing.models import Invoice, InvoiceLine
from pools import services as pool_services
from pools.models import PriceChange
from tests.billing.conftest import at
from tests.factories import PoolFactory

MARCH, APRIL = at(1).date(), at(1, month=4).date()


def refresh(now):
    with time_machine.travel(now, tick=False):
        return services.refresh_usage(now=now)


def set_price(pool, when, hourly=None, share=None):
    with time_machine.travel(when, tick=False):
        if hourly is not None:
            pool.hourly_price_per_gpu = Decimal(hourly)
        if share is not None:
            pool.lending_price_share = Decimal(share)
        pool_services.save_pool(pool=pool)


@pytest.fixture
def doubled_on_the_10th(team, elastic_pool, pod):
    """Spill on March 2 at 6.50 (10 GPU-hours), the price doubled at noon on March 10 (from March 11), spill on
    March 10 afternoon (still 6.50: 2 GPU-hours) and on March 12 (10 GPU-hours at 13.00)."""
    pod(at(2, 8), at(2, 18), pool=elastic_pool)
    set_price(elastic_pool, at(10, 12), hourly="13.0000")
    pod(at(10, 14), at(10, 16), pool=elastic_pool)
    pod(at(12, 8), at(12, 18), pool=elastic_pool)
    refresh(at(13))
    return elastic_pool


def spill_lines(team, month=MARCH):
    lines = InvoiceLine.objects.filter(invoice__team=team, invoice__month=month, kind=LineKind.SPILL)
    return sorted((line.quantity, line.unit_price, line.amount) for line in lines)


def test_usage_before_a_price_change_keeps_its_price(team, doubled_on_the_10th):
    assert spill_lines(team) == [
        (Decimal("10.000000"), Decimal("13.0000"), Decimal("130.00")),
        (Decimal("12.000000"), Decimal("6.5000"), Decimal("78.00")),
    ]
    refresh(at(2, month=4))
    with time_machine.travel(at(2, 1, month=4), tick=False):
        services.close_month(month=MARCH, now=at(2, 1, month=4))
    assert Invoice.objects.get(team=team, month=MARCH).total == Decimal("208.00")
    keys = set(InvoiceLine.objects.filter(kind=LineKind.SPILL).values_list("key", flat=True))
    assert keys == {f"spill:pool:{doubled_on_the_10th.pk}", f"spill:pool:{doubled_on_the_10th.pk}:from:2026-03-11"}


def test_the_budget_and_the_forecast_count_each_day_at_its_price(team, doubled_on_the_10th):
    assert budget.variable_spent(team_ids=[team.pk], month=MARCH) == {team.pk: Decimal("208.00")}
    costs, so_far = spend.variable_costs(team=team, first=MARCH, last=at(12).date(), month=MARCH)
    assert so_far == Decimal("208.00")
    assert (costs[at(2).date()], costs[at(10).date()], costs[at(12).date()]) == (
        Decimal("65.000000"), Decimal("13.000000"), Decimal("130.000000")
    )  # fmt: skip


def test_late_usage_of_a_closed_month_is_adjusted_at_the_price_of_its_day(team, doubled_on_the_10th, pod):
    refresh(at(2, month=4))
    with time_machine.travel(at(2, 1, month=4), tick=False):
        services.close_month(month=MARCH, now=at(2, 1, month=4))
    pod(at(5, 8), at(5, 12), pool=doubled_on_the_10th)  # recorded late: 4 GPU-hours on March 5, at 6.50
    refresh(at(3, month=4))
    [adjustment] = InvoiceLine.objects.filter(adjusts_month=MARCH)
    assert (adjustment.quantity, adjustment.unit_price, adjustment.amount) == (
        Decimal("4.000000"), Decimal("6.5000"), Decimal("26.00")
    )  # fmt: skip


def test_changes_made_the_same_day_take_effect_together_the_next(team, elastic_pool, pod):
    set_price(elastic_pool, at(10, 9), hourly="130.0000")  # a typo...
    set_price(elastic_pool, at(10, 9, 5), hourly="13.0000")  # ...put right five minutes later
    pod(at(10, 10), at(10, 12), pool=elastic_pool)
    pod(at(11, 10), at(11, 12), pool=elastic_pool)
    refresh(at(12))
    assert spill_lines(team) == [
        (Decimal("2.000000"), Decimal("6.5000"), Decimal("13.00")),
        (Decimal("2.000000"), Decimal("13.0000"), Decimal("26.00")),
    ]
    history = list(elastic_pool.price_changes.values_list("effective_from", "hourly_price_per_gpu"))
    assert history == [
        (at(10).date(), Decimal("6.5000")),
        (at(11).date(), Decimal("130.0000")),
        (at(11).date(), Decimal("13.0000")),
    ]


def test_a_pools_prices_by_day(db):
    pool = PoolFactory(hourly_price_per_gpu=Decimal("2.0000"), lending_price_share=Decimal("0.5"))
    unchanged = prices.price_spans([pool], MARCH, at(31).date())
    assert unchanged == {pool.pk: [prices.Price(MARCH, Decimal(2), Decimal("0.5"))]}
    for day, hourly in ((5, "3"), (20, "2")):
        PriceChange.objects.create(
            pool=pool, hourly_price_per_gpu=Decimal(hourly), lending_price_share=Decimal("0.5"),
            effective_from=at(day).date(),
        )  # fmt: skip
    spans = prices.price_spans([pool], MARCH, at(31).date())[pool.pk]
    # before its first change a pool has the first change's prices
    assert [(span.first.day, span.hourly) for span in spans] == [(1, Decimal(3)), (20, Decimal(2))]
    assert prices.price_on(spans, at(19).date()).hourly == Decimal(3)
    assert prices.price_on(spans, at(19).date()).lending == Decimal("1.5000")
    assert [(s.first.day, s.hourly) for s in prices.price_spans([pool], at(6).date(), at(25).date())[pool.pk]] == [
        (6, Decimal(3)), (20, Decimal(2))
    ]  # fmt: skip
