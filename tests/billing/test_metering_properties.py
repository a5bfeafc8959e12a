"""The SQL metering against the reference implementation, over random interval sets (hypothesis).

Periods straddle month boundaries; pods overlap, start before and end after the month, have zero length or are
still running; reservations start and end mid-month. Every figure must be equal to the reference exactly.
"""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import metering, services
from billing.models import DailyUsage
from billing.periods import month_bounds
from pools.choices import PoolKind
from tests.billing import reference
from tests.factories import PoolFactory, ReservationFactory, TeamFactory, UsageIntervalFactory

MONTH = date(2026, 2, 1)  # 28 days; the window reaches into January and March
MONTH_START, MONTH_END = month_bounds(MONTH)
ORIGIN = MONTH_START - timedelta(days=6)
SPAN_SECONDS = int((MONTH_END + timedelta(days=6) - ORIGIN).total_seconds())


def moments():
    """Instants around the month: mostly whole seconds, sometimes with microseconds, often on day boundaries."""
    whole = st.integers(0, SPAN_SECONDS).map(lambda s: ORIGIN + timedelta(seconds=s))
    on_days = st.integers(0, SPAN_SECONDS // 86400).map(lambda d: ORIGIN + timedelta(days=d))
    precise = st.tuples(st.integers(0, SPAN_SECONDS), st.integers(0, 999_999)).map(
        lambda t: ORIGIN + timedelta(seconds=t[0], microseconds=t[1])
    )
    return st.one_of(whole, on_days, precise)


@st.composite
def pods(draw):
    started = draw(moments())
    kind = draw(st.sampled_from(["closed", "closed", "open", "zero"]))
    if kind == "open":
        ended = None
    elif kind == "zero":
        ended = started
    else:
        ended = started + timedelta(seconds=draw(st.integers(1, 20 * 86400)))
    return draw(st.integers(0, 1)), draw(st.integers(0, 2)), draw(st.integers(1, 8)), started, ended


@st.composite
def holds(draw):
    starts = draw(moments())
    ends = starts + timedelta(seconds=draw(st.integers(60, 40 * 86400)))
    price = draw(st.sampled_from([Decimal("9800.00"), Decimal("0.01"), Decimal("1234.57")]))
    return draw(st.integers(0, 1)), draw(st.integers(0, 1)), draw(st.integers(1, 8)), starts, ends, price


@pytest.fixture
def world(db):
    teams = [TeamFactory(), TeamFactory()]
    pools = [
        PoolFactory(kind=PoolKind.RESERVED, hourly_price_per_gpu=Decimal("18.0000")),
        PoolFactory(kind=PoolKind.RESERVED, hourly_price_per_gpu=Decimal("7.3333")),
        PoolFactory(kind=PoolKind.ELASTIC, contracted_gpus=None, hourly_price_per_gpu=Decimal("2.4567")),
    ]
    return teams, pools


def load(world, pod_rows, hold_rows):
    teams, pools = world
    pods_ = []
    for team, pool, gpus, started, ended in pod_rows:
        UsageIntervalFactory(team=teams[team], pool=pools[pool], gpus=gpus, started_at=started, ended_at=ended)
        pods_.append(reference.Pod(teams[team].pk, pools[pool].pk, gpus, started, ended))
    holds_ = []
    for team, pool, gpus, starts, ends, price in hold_rows:
        ReservationFactory(
            team=teams[team], pool=pools[pool], gpus=gpus, starts_at=starts, ends_at=ends, monthly_price_per_gpu=price
        )
        holds_.append(reference.Held(teams[team].pk, pools[pool].pk, gpus, starts, ends, price))
    reserved_pools = {pool.pk for pool in pools if pool.kind == PoolKind.RESERVED}
    return pods_, holds_, reserved_pools


def as_dict(rows) -> dict:
    return {
        (row.team_id, row.pool_id): (row.reserved, row.in_reservation, row.overage, row.spill)
        for row in rows
        if any((row.reserved, row.in_reservation, row.overage, row.spill))
    }


NOW = st.one_of(
    st.just(MONTH_END + timedelta(days=3)),
    st.integers(1, 28 * 86400).map(lambda s: MONTH_START + timedelta(seconds=s)),
)
EXAMPLES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@EXAMPLES
@given(pod_rows=st.lists(pods(), max_size=14), hold_rows=st.lists(holds(), max_size=4), now=NOW)
def test_month_from_scratch_equals_reference(world, pod_rows, hold_rows, now):
    with transaction.atomic():
        pods_, holds_, reserved_pools = load(world, pod_rows, hold_rows)
        until = min(MONTH_END, now)
        expected = reference.meter(pods_, holds_, reserved_pools, MONTH_START, until, now)
        assert as_dict(metering.meter(start=MONTH_START, end=until, now=now)) == expected
        transaction.set_rollback(True)


@EXAMPLES
@given(pod_rows=st.lists(pods(), max_size=14), hold_rows=st.lists(holds(), max_size=4), now=NOW)
def test_daily_rollups_add_up_to_the_reference_and_recompute_identically(world, pod_rows, hold_rows, now):
    with transaction.atomic():
        pods_, holds_, reserved_pools = load(world, pod_rows, hold_rows)
        until = min(MONTH_END, now)
        month_days = [MONTH + timedelta(days=offset) for offset in range(28)]
        services.recompute_days(days=month_days, now=now)
        first = list(
            DailyUsage.objects.order_by("day", "team", "pool").values_list(
                "team",
                "pool",
                "day",
                "reserved_gpu_seconds",
                "in_reservation_gpu_seconds",
                "overage_gpu_seconds",
                "spill_gpu_seconds",
            )
        )
        for team, pool, day, *figures in first:
            day_start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            expected_day = reference.meter(
                pods_, holds_, reserved_pools, day_start, min(day_start + timedelta(days=1), now), now
            )
            assert tuple(figures) == expected_day[(team, pool)]
        totals = {
            key: tuple(Decimal(value) for value in row.values())
            for key, row in services.month_usage_seconds(month=MONTH).items()
            for row in [{k: row[k] for k in ("reserved", "in_reservation", "overage", "spill")}]
        }
        assert {k: v for k, v in totals.items() if any(v)} == reference.meter(
            pods_, holds_, reserved_pools, MONTH_START, until, now
        )
        services.recompute_days(days=month_days[::-1], now=now)  # again, in another order
        again = list(
            DailyUsage.objects.order_by("day", "team", "pool").values_list(
                "team",
                "pool",
                "day",
                "reserved_gpu_seconds",
                "in_reservation_gpu_seconds",
                "overage_gpu_seconds",
                "spill_gpu_seconds",
            )
        )
        assert again == first
        transaction.set_rollback(True)


@EXAMPLES
@given(pod_rows=st.lists(pods(), max_size=10), hold_rows=st.lists(holds(), max_size=4), now=NOW)
def test_cost_lines_equal_the_reference_to_the_cent(world, pod_rows, hold_rows, now):
    with transaction.atomic():
        teams, pools = world
        pods_, holds_, reserved_pools = load(world, pod_rows, hold_rows)
        until = min(MONTH_END, now)
        services.recompute_days(days=[MONTH + timedelta(days=offset) for offset in range(28)], now=now)
        charges = services.month_charges(month=MONTH, now=now)
        prices = {pool.pk: pool.hourly_price_per_gpu for pool in pools}
        usage = reference.meter(pods_, holds_, reserved_pools, MONTH_START, until, now)
        contracted = {pool.pk: pool.contracted_gpus for pool in pools if pool.pk in reserved_pools}
        lending = reference.meter_lending(pods_, holds_, [], contracted, reserved_pools, MONTH_START, until, now)
        # the lending price: the hourly price × the pool's share (0.5 by default), to four places, half up
        lending_prices = {
            pool.pk: Fraction(
                int(Fraction(pool.hourly_price_per_gpu) * Fraction(pool.lending_price_share) * 10**4 + Fraction(1, 2)),
                10**4,
            )
            for pool in pools
        }
        for team in teams:
            expected = sorted(
                [
                    reference.cents_half_up(reference.fee(hold, MONTH_START, MONTH_END, until))
                    for hold in holds_
                    if hold.team == team.pk and hold.starts_at < until and hold.ends_at > MONTH_START
                ]
                + [
                    reference.cents_half_up(Fraction(gpu_seconds) * Fraction(prices[pool]) / 3600)
                    for (team_id, pool), (_r, _u, overage, spill) in usage.items()
                    if team_id == team.pk
                    for gpu_seconds in (overage, spill)
                    if gpu_seconds
                ]
                + [
                    -reference.cents_half_up(Fraction(lent) * lending_prices[pool] / 3600)
                    for (team_id, pool), (lent, _borrowed, _unreserved) in lending.items()
                    if team_id == team.pk and lent
                ]
            )
            assert sorted(charge.amount for charge in charges.get(team.pk, [])) == expected
        transaction.set_rollback(True)
