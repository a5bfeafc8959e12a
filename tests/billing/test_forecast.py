"""The month-end forecast's arithmetic (billing/forecast.py): pure, no database."""

from decimal import Decimal

import pytest

from billing.forecast import MIN_SAMPLES, RECENT_DAYS, forecast_month, quantile

D = Decimal


def test_a_team_with_no_variable_cost_is_forecast_its_reservation_fees_exactly():
    forecast = forecast_month(days_in_month=30, days_elapsed=10, fixed=D("96000"), daily_variable=[D(0)] * 200)
    assert (forecast.low, forecast.expected, forecast.high) == (D("96000.00"),) * 3
    assert forecast.basis == "after_quiet"


def test_a_constant_rate_projects_the_rest_of_the_month_at_that_rate_with_no_spread():
    forecast = forecast_month(days_in_month=30, days_elapsed=10, fixed=D("1000"), daily_variable=[D("50")] * 120)
    assert forecast.basis == "ratios"
    assert forecast.variable_so_far == D("500.00")
    assert forecast.rest_expected == forecast.rest_low == forecast.rest_high == D("1000.00")  # 20 days × 50
    assert forecast.expected == D("2500.00")


def test_the_interval_widens_with_how_much_the_days_varied_and_holds_the_expected_value():
    alternating = [D("10") if day % 2 else D("200") for day in range(150)]
    forecast = forecast_month(days_in_month=31, days_elapsed=20, fixed=D(0), daily_variable=alternating)
    assert forecast.samples >= MIN_SAMPLES
    assert forecast.low < forecast.expected < forecast.high


def test_a_short_history_falls_back_to_the_normal_approximation():
    history = [D("100"), D("140"), D("60"), D("100")]
    forecast = forecast_month(days_in_month=30, days_elapsed=4, fixed=D(0), daily_variable=history)
    assert forecast.basis == "normal"
    # 26 days × mean 100, ± 1.2816 × sd(32.66) × √26
    assert forecast.rest_expected == D("2600.00")
    assert forecast.rest_high - forecast.rest_expected == forecast.rest_expected - forecast.rest_low
    assert D("210") < forecast.rest_high - forecast.rest_expected < D("215")


def test_work_already_queued_is_a_floor_under_the_rest_of_the_month():
    forecast = forecast_month(
        days_in_month=30, days_elapsed=10, fixed=D(0), daily_variable=[D(0)] * 100, queued=D("750")
    )
    assert forecast.rest_low == forecast.rest_expected == forecast.rest_high == D("750.00")
    assert forecast.queued == D("750.00")


def test_a_net_lenders_credits_still_to_come_are_forecast_once():
    """A team that only lends earns 100.00 a day of credit: its variable part is -100.00 a day. On day 10 of 30 the
    rest of the month brings 20 × -100.00 more, not 0 (the queue's floor at 0) nor twice that (n × rate added to
    what followed such windows, which already is the rest)."""
    forecast = forecast_month(days_in_month=30, days_elapsed=10, fixed=D("39200"), daily_variable=[D("-100")] * 120)
    assert forecast.basis == "after_quiet"
    assert forecast.variable_so_far == D("-1000.00")
    assert forecast.rest_low == forecast.rest_expected == forecast.rest_high == D("-2000.00")
    assert forecast.expected == D("36200.00")


def test_a_lenders_queued_work_costs_beside_its_credits():
    forecast = forecast_month(
        days_in_month=30, days_elapsed=10, fixed=D(0), daily_variable=[D("-100")] * 120, queued=D("750")
    )
    assert forecast.rest_expected == D("-1250.00")  # 20 × -100.00 of credits, and the queued work's 750.00


def test_a_growing_history_is_forecast_above_its_recent_rate():
    growing = [D(100) * D("1.01") ** day for day in range(200)]  # 1 % a day
    history, rest_of_month = growing[:180], sum(growing[180:])
    forecast = forecast_month(days_in_month=30, days_elapsed=10, fixed=D(0), daily_variable=history)
    recent_rate = sum(history[-RECENT_DAYS:]) / RECENT_DAYS
    assert forecast.rest_expected > 20 * recent_rate
    assert forecast.rest_low <= rest_of_month.quantize(D("0.01")) <= forecast.rest_high  # exact: constant ratios


def test_the_last_day_of_the_month_is_the_bill_itself():
    forecast = forecast_month(days_in_month=28, days_elapsed=28, fixed=D("5"), daily_variable=[D("1.005")] * 28)
    assert forecast.basis == "month_over"
    assert forecast.low == forecast.expected == forecast.high == D("33.14")


def test_days_elapsed_must_lie_in_the_month_and_be_in_the_history():
    with pytest.raises(ValueError):
        forecast_month(days_in_month=30, days_elapsed=31, fixed=D(0), daily_variable=[D(0)] * 40)
    with pytest.raises(ValueError):
        forecast_month(days_in_month=30, days_elapsed=10, fixed=D(0), daily_variable=[D(0)] * 5)


def test_quantile_interpolates_between_order_statistics():
    assert quantile([D(4), D(1), D(3), D(2)], D("0.5")) == D("2.5")
    assert quantile([D(7)], D("0.9")) == D(7)
