"""Metering by example: the PRODUCT.md formulas on cases a person can check by hand."""

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import metering, services
from billing.models import DailyUsage
from billing.money import hourly_cost, hours, round_half_up, to_cents
from billing.periods import month_bounds
from tests.billing.conftest import at
from tests.factories import ReservationFactory, TeamFactory

MARCH = at(1).date()
HOUR = Decimal(3600)


def month_figures(now, **kwargs):
    start, end = month_bounds(MARCH)
    rows = metering.meter(start=start, end=min(end, now), now=now, **kwargs)
    return {(row.team_id, row.pool_id): (row.reserved, row.in_reservation, row.overage, row.spill) for row in rows}


def test_usage_above_the_reservation_is_overage_and_below_is_in_reservation(team, reserved_pool, reservation, pod):
    # 4 GPUs reserved; from 10:00 to 12:00, two pods of 3 GPUs overlap for one hour (11:00-12:00) → 6 GPUs.
    pod(at(2, 10), at(2, 12), gpus=3)
    pod(at(2, 11), at(2, 13), gpus=3)
    figures = month_figures(at(1, month=4))[(team.pk, reserved_pool.pk)]
    reserved, in_reservation, overage, spill = figures
    assert reserved == 4 * 31 * 24 * HOUR
    # 10-11: 3 used; 11-12: 6 used → 4 in, 2 over; 12-13: 3 used.
    assert in_reservation == (3 + 4 + 3) * HOUR
    assert overage == 2 * HOUR
    assert spill == 0


def test_usage_in_an_elastic_pool_is_spill(team, elastic_pool, reservation, pod):
    pod(at(5, 8), at(5, 9, 30), gpus=2, pool=elastic_pool)
    assert month_figures(at(1, month=4))[(team.pk, elastic_pool.pk)] == (0, 0, 0, Decimal(3 * 3600))


def test_open_intervals_count_until_now_and_intervals_are_clipped_to_the_month(team, reserved_pool, pod):
    pod(at(28, 0, month=2), at(1, 2), gpus=1)  # crosses into March: 2 hours count
    pod(at(31, 23), None, gpus=2)  # still running at "now" = April 1st 01:00: clipped at the month's end
    pod(at(10, 0), at(10, 0), gpus=8)  # zero length: nothing
    figures = month_figures(at(1, 1, month=4))[(team.pk, reserved_pool.pk)]
    assert figures == (0, 0, (2 + 2) * HOUR, 0)
    now = at(31, 23, 30)  # mid-way: the open pod has run 30 minutes
    assert month_figures(now)[(team.pk, reserved_pool.pk)] == (0, 0, 2 * HOUR + 2 * 1800, 0)


def test_metering_refuses_a_period_ending_after_now(db):
    with pytest.raises(ValueError, match="after now"):
        metering.meter(start=at(1), end=at(2), now=at(1, 12))


def test_reservation_fee_is_pro_rated_to_the_minute(team, reserved_pool):
    from tests.factories import ReservationFactory

    # 2 GPUs from March 16th 12:00 to April 10th: 15.5 days of March's 31 → exactly half the month.
    reservation = ReservationFactory(
        team=team, pool=reserved_pool, gpus=2, starts_at=at(16, 12), ends_at=at(10, month=4)
    )
    gpu_months, fee = services.reservation_fee(reservation, month=MARCH, until=at(1, month=4))
    assert gpu_months == 1
    assert fee == Decimal("9800.00")
    # One minute less: 2 × 9800 × (22319 / 44640) = 9799.560931… → 9799.56
    reservation.starts_at = at(16, 12, 1)
    _months, fee = services.reservation_fee(reservation, month=MARCH, until=at(1, month=4))
    assert fee == Decimal("9799.56")


def test_rounding_is_half_up_to_the_cent():
    assert to_cents(Decimal("0.005")) == Decimal("0.01")
    assert to_cents(Decimal("0.0049999")) == Decimal("0.00")
    assert to_cents(Decimal("2.675")) == Decimal("2.68")  # a float would make this 2.67
    assert round_half_up(Decimal("-0.005"), 2) == Decimal("-0.01")
    # 1 GPU-second at 18.0000 per GPU-hour is 0.005 exactly → 0.01
    assert hourly_cost(Decimal(1), Decimal("18.0000")) == Decimal("0.01")
    assert hours(Decimal(1)) == Decimal("0.000278")


def test_a_day_recomputed_gives_the_same_rows(team, reserved_pool, reservation, pod):
    pod(at(3, 22), at(4, 3), gpus=6)
    now = at(10)
    days = [at(3).date(), at(4).date()]
    services.recompute_days(days=days, now=now)
    first = list(
        DailyUsage.objects.order_by("day").values_list("day", "in_reservation_gpu_seconds", "overage_gpu_seconds")
    )
    assert first == [(days[0], 2 * 4 * HOUR, 2 * 2 * HOUR), (days[1], 3 * 4 * HOUR, 3 * 2 * HOUR)]
    services.recompute_days(days=days, now=now)
    assert (
        list(DailyUsage.objects.order_by("day").values_list("day", "in_reservation_gpu_seconds", "overage_gpu_seconds"))
        == first
    )


def test_intervals_without_a_team_are_not_billed(reserved_pool, pod, team):
    pod(at(2), at(3), gpus=1).__class__.objects.update(team=None)
    assert month_figures(at(1, month=4)) == {}


def test_team_filter_meters_only_those_teams(team, other_team, reserved_pool, pod):
    pod(at(2), at(2, 1), gpus=1)
    pod(at(2), at(2, 1), gpus=1, for_team=other_team)
    assert set(month_figures(at(1, month=4), team_ids=[other_team.pk])) == {(other_team.pk, reserved_pool.pk)}
    assert month_figures(at(1, month=4), team_ids=[]) == {}


def test_the_day_split_follows_utc_midnights(team, reserved_pool, pod):
    pod(at(1, 23, 30) - timedelta(days=0), at(2, 0, 45), gpus=1)
    services.recompute_days(days=[at(1).date(), at(2).date()], now=at(5))
    assert list(DailyUsage.objects.order_by("day").values_list("overage_gpu_seconds", flat=True)) == [
        Decimal(1800),
        Decimal(2700),
    ]


def test_odd_microseconds_stay_exact_over_three_years(team, reserved_pool, elastic_pool, pod):
    # Instants are read as microseconds since the period's start through a double (billing/metering.py): over three
    # years, where the double's rounding is largest, odd microseconds must still come out to the last digit.
    start, end = at(1, year=2025), at(1, year=2028)
    first = at(5, 12, 34, year=2025).replace(second=56, microsecond=789_123)
    last = at(31, 23, 59, month=12, year=2027).replace(second=59, microsecond=999_999)
    pod(first, last, gpus=7)
    pod(start + timedelta(microseconds=1), end - timedelta(microseconds=3), gpus=3, pool=elastic_pool)
    rows = {(row.team_id, row.pool_id): row for row in metering.meter(start=start, end=end, now=end)}
    expected_overage = 7 * Decimal((last - first) // timedelta(microseconds=1)) / 1_000_000
    expected_spill = 3 * Decimal((end - start) // timedelta(microseconds=1) - 4) / 1_000_000
    assert rows[(team.pk, reserved_pool.pk)].overage == expected_overage
    assert rows[(team.pk, elastic_pool.pk)].spill == expected_spill
    plain = {(row.team_id, row.pool_id): row for row in metering.meter(start=start, end=end, now=end, lending=False)}
    assert plain[(team.pk, reserved_pool.pk)].overage == expected_overage
    assert plain[(team.pk, elastic_pool.pk)].spill == expected_spill


def test_elastic_pools_are_cut_at_utc_midnights_from_any_start(team, reserved_pool, elastic_pool, pod):
    # Elastic and shared pools are summed by cutting intervals at midnight (billing/metering.py, `other_days`), the
    # reserved ones by stepping through events: both must agree on days and on periods that start mid-day.
    pod(at(1, 22), at(3, 1, 30), gpus=2, pool=elastic_pool)
    pod(at(1, 22), at(3, 1, 30), gpus=2)
    services.recompute_days(days=[at(1).date(), at(2).date(), at(3).date()], now=at(5))
    by_day = DailyUsage.objects.order_by("pool_id", "day").values_list(
        "pool_id", "day", "overage_gpu_seconds", "spill_gpu_seconds"
    )
    assert list(by_day) == [
        (reserved_pool.pk, at(1).date(), 2 * 2 * HOUR, 0),
        (reserved_pool.pk, at(2).date(), 2 * 24 * HOUR, 0),
        (reserved_pool.pk, at(3).date(), 2 * Decimal("1.5") * HOUR, 0),
        (elastic_pool.pk, at(1).date(), 0, 2 * 2 * HOUR),
        (elastic_pool.pk, at(2).date(), 0, 2 * 24 * HOUR),
        (elastic_pool.pk, at(3).date(), 0, 2 * Decimal("1.5") * HOUR),
    ]
    for lending in (True, False):
        rows = {row.pool_id: row for row in metering.meter(start=at(2, 6), end=at(3, 1), now=at(5), lending=lending)}
        assert (rows[reserved_pool.pk].overage, rows[elastic_pool.pk].spill) == (2 * 19 * HOUR, 2 * 19 * HOUR)


def test_a_contract_change_leaves_the_days_before_it_as_they_were(
    team, other_team, reserved_pool, reservation, pod, platform_admin
):
    # 16 GPUs contracted, 4 reserved by `team` (lending idle GPUs): 12 unreserved. `other_team` uses 14 on March 2nd:
    # 2 beyond the unreserved, borrowed from `team`. Shrinking the contract to 4 later (today) must not re-split that
    # day when it is metered again: then all 4 of `team`'s idle GPUs would be borrowed.
    from pools import services as pool_services
    from pools.models import ContractChange

    pod(at(2), at(3), gpus=14, for_team=other_team)
    day = [at(2).date()]

    def lent_and_borrowed():
        services.recompute_days(days=day, now=at(10))
        rows = DailyUsage.objects.filter(pool=reserved_pool)
        return {row.team_id: (row.lent_gpu_seconds, row.borrowed_gpu_seconds) for row in rows}

    before = lent_and_borrowed()
    assert before == {team.pk: (2 * 24 * HOUR, 0), other_team.pk: (0, 2 * 24 * HOUR)}
    reserved_pool.contracted_gpus = 4
    pool_services.save_pool(pool=reserved_pool, user=platform_admin)
    assert list(ContractChange.objects.values_list("contracted_gpus", "changed_by")) == [
        (16, None),
        (4, platform_admin.pk),
    ]
    assert lent_and_borrowed() == before


def test_the_pools_month_counts_the_contract_as_it_changed(reserved_pool):
    from billing import selectors
    from pools.models import ContractChange

    ContractChange.objects.create(pool=reserved_pool, contracted_gpus=16, effective_from=at(1, month=1))
    ContractChange.objects.create(pool=reserved_pool, contracted_gpus=8, effective_from=at(3, 12))
    [row] = [row for row in selectors.pool_month(month=MARCH, now=at(5)) if row["pool"] == reserved_pool]
    assert row["contracted_gpu_hours"] == hours((16 * Decimal("2.5") + 8 * Decimal("1.5")) * 24 * HOUR)


def test_a_period_longer_than_the_longest_is_refused(team, reserved_pool):
    start = at(1, year=2025)
    with pytest.raises(ValueError, match="more than 1461 days"):
        metering.meter(start=start, end=start + metering.MAX_PERIOD + timedelta(microseconds=1), now=at(1, year=2030))


def test_lending_on_the_last_day_of_the_longest_period(team, reserved_pool, pod):
    # Two teams hold all 16 GPUs of the pool; in the period's last hour the lender idles and the borrower runs 3 GPUs
    # over its reservation: 1,460 days in, the borrowing is the same as in a period of that one day.
    start = at(1, year=2025)
    end = start + metering.MAX_PERIOD
    lender = TeamFactory()
    ReservationFactory(team=team, pool=reserved_pool, gpus=4, starts_at=start, ends_at=end)
    ReservationFactory(team=lender, pool=reserved_pool, gpus=12, starts_at=start, ends_at=end)
    pod(end - timedelta(hours=1), end - timedelta(microseconds=1), gpus=7)
    pod(end - timedelta(hours=1), end - timedelta(minutes=30), gpus=2, for_team=lender)
    last_day = end - timedelta(days=1)
    long = {(row.team_id, row.pool_id): row for row in metering.meter(start=start, end=end, now=end)}
    short = {(row.team_id, row.pool_id): row for row in metering.meter(start=last_day, end=end, now=end)}
    borrowed = 3 * (HOUR - Decimal("0.000001"))
    assert long[(team.pk, reserved_pool.pk)].borrowed == short[(team.pk, reserved_pool.pk)].borrowed == borrowed
    assert long[(lender.pk, reserved_pool.pk)].lent == short[(lender.pk, reserved_pool.pk)].lent == borrowed


def test_stale_days_are_metered_in_runs_no_longer_than_the_longest_period():
    first = at(1, year=2020).date()
    days = [first + timedelta(days=n) for n in range(3000)] + [first + timedelta(days=3001)]
    runs = services._contiguous_runs(days)
    assert [(last - start).days + 1 for start, last in runs] == [1461, 1461, 78, 1]
    assert runs[0][0] == first
    assert all(runs[n][1] + timedelta(days=1) == runs[n + 1][0] for n in range(2))
    assert runs[-1] == (days[-1], days[-1])
