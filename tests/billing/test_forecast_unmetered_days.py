"""When metering lags (the billing worker down, a backlog of days), leads saw the forecast count the days the rollups
had not reached as days that cost nothing: a team whose spend was perfectly steady was forecast far below what it
would pay (3,164.57 for a certain 4,836.00), with an 80 % interval that excluded it, and neither the page nor the
spend API said the figures stopped at March 11. The forecast now counts the month's days metered whole
(`MeteredDay`), projects the rest from there, and says up to when it is metered."""

from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing import services, spend
from tests.billing.conftest import at

NOW = at(16, 12)
MONTH_BILL = 31 * Decimal("156.00")  # 4,836.00: what March costs, whatever the forecast says


@pytest.fixture
def steady_spill(team, elastic_pool, pod):
    """One GPU spilled into the elastic pool without a break since February 1: 24 × 6.50 = 156.00 every day."""
    pod(at(1, month=2), None, gpus=1, pool=elastic_pool)


def test_days_not_metered_yet_are_not_forecast_as_days_without_spend(team, steady_spill):
    with time_machine.travel(at(11), tick=False):
        services.refresh_usage(now=at(11))  # metered up to March 11, 00:00; then the refresh stops for a while
    with time_machine.travel(NOW, tick=False):
        result = spend.team_forecast(team=team, now=NOW)
    forecast = result.forecast
    assert (forecast.days_elapsed, result.metered_until) == (10, at(11))
    assert forecast.variable_so_far == 10 * Decimal("156.00")
    assert forecast.low <= MONTH_BILL <= forecast.high, (forecast.low, forecast.expected, forecast.high)


def test_a_forecast_metered_to_yesterday_counts_every_day_before_today(team, steady_spill):
    """The control: once the refresh has caught up, the forecast counts the month's 15 whole days."""
    with time_machine.travel(NOW, tick=False):
        services.refresh_usage(now=NOW)
        result = spend.team_forecast(team=team, now=NOW)
    assert (result.forecast.days_elapsed, result.metered_until) == (15, at(16))
    assert result.forecast.variable_so_far == 15 * Decimal("156.00")
    assert result.forecast.low <= MONTH_BILL <= result.forecast.high


def test_the_page_and_the_api_say_up_to_when_the_forecast_is_metered(client, lead, steady_spill):
    with time_machine.travel(at(11), tick=False):
        services.refresh_usage(now=at(11))
    client.force_login(lead)
    with time_machine.travel(NOW, tick=False):
        data = client.get("/api/v1/spend/alpha/").json()
        body = client.get(reverse("billing:team_billing", args=["alpha"])).content.decode()
    assert data["forecast"]["metered_until"] == "2026-03-11T00:00:00Z"
    assert data["forecast"]["days_elapsed"] == 10
    section = body[body.index('id="spend"') :]
    assert "after 10 whole days" in section
    assert "Metered up to 2026-03-11 00:00 UTC." in section
