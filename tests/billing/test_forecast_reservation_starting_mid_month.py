"""A reservation that starts or ends later this month moves the team's use between overage and the reservation. Leads
saw the forecast count a reservation signed to stop paying overage twice: its fee in the fixed part (as it should be)
and the rest of the month still projected at the overage rate of the days before it (68,742.19 for a month that
costs 48,006.19, with an interval that excluded it); and a reservation ending mid-month turned the same use into
overage the forecast never showed. The rest is now priced against the reservations in force on each of its days."""

from datetime import timedelta
from decimal import Decimal

import time_machine

from billing import services, spend
from billing.forecast import forecast_month
from tests.billing.conftest import at
from tests.factories import ReservationFactory

NOW = at(16, 12)
OVERAGE_A_DAY = 4 * 24 * Decimal("18.00")  # 4 GPUs above the reservation all day: 1,728.00


def forecast(team):
    with time_machine.travel(NOW, tick=False):
        services.refresh_usage(now=NOW)
        return spend.team_forecast(team=team, now=NOW).forecast


def test_a_reservation_starting_mid_month_ends_the_overage_it_covers(team, reserved_pool, pod):
    pod(at(1, month=2), None, gpus=4)  # 4 GPUs in use without a break since February 1, no reservation
    ReservationFactory(
        team=team, pool=reserved_pool, gpus=4, starts_at=at(20), ends_at=at(20) + timedelta(days=90),
        monthly_price_per_gpu=Decimal("9800.00"),
    )  # fmt: skip
    result = forecast(team)
    fee = Decimal("15174.19")  # 4 × 9,800.00 × 12/31 (March 20-31)
    assert result.fixed == fee
    march_bill = fee + 19 * OVERAGE_A_DAY  # March 1-19; from the 20th the same 4 GPUs are inside the reservation
    assert result.low <= march_bill <= result.high, (result.low, result.expected, result.high)
    assert result.expected == march_bill  # 48,006.19: a steady team, a steady forecast


def test_a_reservation_ending_mid_month_leaves_its_use_as_overage(team, reserved_pool, pod):
    pod(at(1, month=2), None, gpus=4)  # the same 4 GPUs, reserved since February 1 up to March 20
    ReservationFactory(
        team=team, pool=reserved_pool, gpus=4, starts_at=at(1, month=2), ends_at=at(20),
        monthly_price_per_gpu=Decimal("9800.00"),
    )  # fmt: skip
    result = forecast(team)
    fee = Decimal("24025.81")  # 4 × 9,800.00 × 19/31 (March 1-19)
    assert (result.fixed, result.variable_so_far) == (fee, Decimal("0.00"))
    march_bill = fee + 12 * OVERAGE_A_DAY  # March 20-31: the same use, above no reservation
    assert result.low <= march_bill <= result.high, (result.low, result.expected, result.high)
    assert result.expected == march_bill


def test_a_reservation_held_all_month_changes_nothing(team, reserved_pool, pod):
    """The control: 6 GPUs in use with 4 reserved all month, the rest projected at the recent overage rate."""
    pod(at(1, month=2), None, gpus=6)
    ReservationFactory(team=team, pool=reserved_pool, gpus=4, starts_at=at(1, month=2), ends_at=at(1, month=5))
    result = forecast(team)
    assert result.rest_expected == 16 * 2 * 24 * Decimal("18.00")  # 2 GPUs of overage for 16 days


def test_the_arithmetic_adds_the_change_to_the_projection_before_the_ratios_scale_it():
    steady = [Decimal("100")] * 60
    plain = forecast_month(days_in_month=30, days_elapsed=10, fixed=Decimal(0), daily_variable=steady)
    moved = forecast_month(
        days_in_month=30, days_elapsed=10, fixed=Decimal(0), daily_variable=steady, reservation_change=Decimal("-500")
    )
    assert (plain.basis, plain.rest_expected) == ("ratios", Decimal("2000.00"))
    assert (moved.basis, moved.rest_expected, moved.rest_low, moved.rest_high) == ("ratios", *[Decimal("1500.00")] * 3)
