"""Reservation advice (billing/advice.py): the cheapest size equals a brute-force search over every size."""

from decimal import Decimal
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.advice import advise, cheapest_size, exact_cost

PRICES = {"monthly_price": Decimal("12000"), "hourly_price": Decimal("30")}


def brute_force(levels, *, months, monthly_price, hourly_price) -> int:
    """The smallest size of least exact cost, trying every size from 0 to the highest level."""
    top = max(levels, default=0)
    costs = [
        (exact_cost(levels, size, months=months, monthly_price=monthly_price, hourly_price=hourly_price), size)
        for size in range(top + 1)
    ]
    return min(costs)[1]


@settings(max_examples=200, deadline=None)
@given(
    levels=st.dictionaries(st.integers(0, 40), st.integers(0, 3 * 31 * 86400), max_size=12),
    months=st.integers(1, 3),
    monthly=st.decimals(min_value=1, max_value=30000, places=2),
    hourly=st.decimals(min_value=Decimal("0.01"), max_value=100, places=2),
)
def test_the_advice_is_the_brute_force_optimum_over_every_size(levels, months, monthly, hourly):
    prices = {"monthly_price": monthly, "hourly_price": hourly}
    assert cheapest_size(levels, months=months, **prices) == brute_force(levels, months=months, **prices)


def test_a_team_busy_all_the_time_should_reserve_what_it_uses():
    month = 30 * 86400
    advice = advise({8: month}, current_gpus=4, months=1, **PRICES)
    assert advice.advised.reserved_gpus == 8
    assert advice.advised.hours_above_reservation == 0
    # Keeping 4: 4 × 12000 + 4 GPUs × 720 h × 30 = 134,400; reserving 8: 96,000.
    assert advice.current.total == Decimal("134400.00")
    assert advice.saving == Decimal("38400.00")


def test_a_short_peak_is_cheaper_on_elastic_gpus_and_its_hours_are_the_risk():
    hour = 3600
    # 8 GPUs for 700 hours, 16 GPUs for 20 hours: the extra 8 pay 20 × 30 = 600 each, far less than a month's fee.
    advice = advise({8: 700 * hour, 16: 20 * hour}, current_gpus=16, months=1, **PRICES)
    assert advice.advised.reserved_gpus == 8
    assert advice.advised.elastic_peak_gpus == 8
    assert advice.advised.elastic_gpu_hours == Decimal("160.000000")
    assert advice.advised.hours_above_reservation == Decimal("20.000000")
    assert advice.saving == Decimal(8 * 12000 - 160 * 30)


def test_a_tie_goes_to_the_smaller_reservation():
    # 400 hours above r costs exactly a month's fee: reserving the GPU or not costs the same.
    assert cheapest_size({1: Fraction(400 * 3600)}, months=1, **PRICES) == 0
