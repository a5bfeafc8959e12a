"""The lead's forecast and reservation advice (billing/spend.py) on the billing page and in the API."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing import services, spend
from billing.choices import LineKind
from jobs.choices import JobState
from portal.models import Team
from tests.billing.conftest import at
from tests.factories import JobFactory, ReservationFactory

NOW = at(16, 12)  # March 2026 is half over: 15 whole days metered


@pytest.fixture
def metered(team, other_team, reservation, pod, elastic_pool):
    pod(at(2, 10), at(2, 12), gpus=6)  # 4 GPU-hours of overage × 18.00 = 72.00
    pod(at(3, 0), at(3, 2), gpus=1, pool=elastic_pool)  # 2 GPU-hours of spill × 6.50 = 13.00
    pod(at(3, 0), at(3, 5), gpus=2, for_team=other_team)
    with time_machine.travel(NOW, tick=False):
        services.refresh_usage(now=NOW)


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def test_the_forecast_is_the_fees_plus_the_variable_part_so_far_plus_the_rest_at_the_recent_rate(team, metered, frozen):
    result = spend.team_forecast(team=team, now=NOW).forecast
    assert result.fixed == Decimal("39200.00")  # 4 GPUs × 9,800.00 for the whole month
    assert result.variable_so_far == Decimal("85.00")
    assert (result.days_elapsed, result.days_in_month) == (15, 31)
    # 85.00 over the last 14 days → 16 days × 85 / 14 = 97.14; too little history for ratios: normal interval.
    assert result.basis == "normal"
    assert result.rest_expected == Decimal("97.14")
    assert result.expected == Decimal("39382.14")
    assert result.low < result.expected < result.high


def test_queued_jobs_above_the_reservation_are_a_floor_under_the_rest(team, metered, frozen, elastic_pool):
    JobFactory(team=team, pool=elastic_pool, gpus=2, max_run_minutes=600, state=JobState.QUEUED)
    result = spend.team_forecast(team=team, now=NOW).forecast
    assert result.queued == Decimal("130.00")  # 2 GPUs × 10 h × 6.50
    assert result.rest_low == result.rest_expected == Decimal("130.00")


def test_queued_jobs_that_fit_in_the_idle_reservation_add_nothing(team, metered, frozen, reserved_pool):
    JobFactory(team=team, pool=reserved_pool, gpus=4, max_run_minutes=600, state=JobState.QUEUED)
    assert spend.team_forecast(team=team, now=NOW).forecast.queued == Decimal("0.00")


@pytest.fixture
def february(team, reserved_pool, pod):
    """Team Alpha used 6 GPUs all February, with 4 reserved."""
    ReservationFactory(
        team=team,
        pool=reserved_pool,
        gpus=4,
        starts_at=at(1, month=2),
        ends_at=at(1, month=3),
        monthly_price_per_gpu=Decimal("9800.00"),
    )
    pod(at(1, month=2), at(1, month=3), gpus=6)
    with time_machine.travel(NOW, tick=False):
        services.refresh_usage(now=NOW)


def test_the_advice_reserves_what_a_busy_team_uses_and_says_what_it_saves(team, reservation, february, frozen):
    advice = spend.team_advice(team=team, now=NOW)
    assert (advice.first_month, advice.last_month, advice.months) == (at(1, month=2).date(), at(1, month=2).date(), 1)
    # 672 h × 18.00 = 12,096.00 per extra GPU > 9,800.00 a month: reserve all 6.
    assert advice.advice.advised.reserved_gpus == 6
    assert advice.advice.current.total == Decimal("63392.00")  # 4 × 9,800 + 2 × 672 × 18
    assert advice.advice.advised.total == Decimal("58800.00")
    assert advice.advice.saving == Decimal("4592.00")
    assert advice.advice.advised.hours_above_reservation == 0


def test_the_lead_sees_forecast_chart_and_advice_on_the_page_of_this_month(client, lead, reservation, february, frozen):
    client.force_login(lead)
    body = client.get(reverse("billing:team_billing", args=["alpha"])).content.decode()
    assert "Month-end forecast" in body and 'class="band"' in body
    assert "39,200.00" in body
    assert "reserving <strong>6 GPUs</strong> would have cost least" in body
    assert "4,592.00" in body
    past = client.get(reverse("billing:team_billing", args=["alpha"]), {"month": "2026-02"}).content.decode()
    assert "Month-end forecast" not in past


def test_the_page_reads_in_chinese(client, lead, reservation, february, frozen):
    lead.language = "zh-hans"
    lead.save()
    client.force_login(lead)
    body = client.get(reverse("billing:team_billing", args=["alpha"]), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "月末预测" in body
    assert "Month-end forecast" not in body


def test_the_api_gives_the_forecast_and_the_advice_to_a_lead_only(
    client, lead, researcher, reservation, february, frozen
):
    client.force_login(lead)
    data = client.get("/api/v1/spend/alpha/").json()
    assert data["forecast"]["fixed"] == "39200.00"  # money as a string to the cent, never a float
    assert data["forecast"]["interval"] == "80 %"
    assert data["advice"]["advised"]["reserved_gpus"] == 6
    assert data["advice"]["saving"] == "4592.00"
    assert data["advice"]["current"]["total"] == "63392.00"
    assert data["advice"]["monthly_price_per_gpu"] == "9800.00"
    assert data["advice"]["hourly_price_per_gpu"] == "18.0000"  # a unit price keeps its four places
    client.force_login(researcher)
    assert client.get("/api/v1/spend/alpha/").status_code == 404


def test_a_lead_sets_the_budget_on_the_page_and_sees_it_with_its_line_on_the_chart(client, lead, metered, frozen):
    client.force_login(lead)
    response = client.post(reverse("billing:team_budget_set", args=["alpha"]), {"monthly_cap": "100"})
    assert response.status_code == 302
    body = client.get(reverse("billing:team_billing", args=["alpha"])).content.decode()
    assert "Overage and spill this month, before lending credits: 85.00 of a 100.00 budget (85.0 %)." in body
    assert "the money alert has fired" in body
    assert 'class="budget"' in body


def test_once_reached_the_lead_cannot_raise_the_budget_and_is_told_why(client, lead, metered, frozen):
    client.force_login(lead)
    client.post(reverse("billing:team_budget_set", args=["alpha"]), {"monthly_cap": "50"})
    body = client.get(reverse("billing:team_billing", args=["alpha"])).content.decode()
    assert "The budget is reached" in body
    response = client.post(reverse("billing:team_budget_set", args=["alpha"]), {"monthly_cap": "5000"})
    assert response.status_code == 400
    assert "only a platform admin may raise or remove it" in response.content.decode()


def test_a_researcher_cannot_set_the_budget(client, researcher, metered, frozen):
    client.force_login(researcher)
    assert client.post(reverse("billing:team_budget_set", args=["alpha"]), {"monthly_cap": "1"}).status_code == 404


def test_the_api_sets_the_budget_and_an_admin_lifts_it_for_a_job(client, team, lead, platform_admin, metered, frozen):
    from billing.models import BudgetLift

    client.force_login(lead)
    answer = client.put("/api/v1/spend/alpha/budget/", {"monthly_cap": "80.00"}, content_type="application/json")
    assert answer.status_code == 200
    assert answer.json() == {"team": "alpha", "monthly_cap": "80.00"}
    data = client.get("/api/v1/spend/alpha/").json()
    assert data["budget"]["reached"] is True
    assert (data["budget"]["spent"], data["budget"]["cap"]) == ("85.00", "80.00")
    assert Decimal(data["budget"]["used_percent"]) > 100
    refused = client.put("/api/v1/spend/alpha/budget/", {"monthly_cap": "900"}, content_type="application/json")
    assert refused.status_code == 400
    job = JobFactory(team=team, state=JobState.QUEUED)
    assert client.post("/api/v1/budget-lifts/", {"job": job.pk}, content_type="application/json").status_code == 404
    client.force_login(platform_admin)
    lifted = client.post("/api/v1/budget-lifts/", {"job": job.pk, "reason": "demo"}, content_type="application/json")
    assert lifted.status_code == 201
    assert BudgetLift.objects.get().job == job


def test_the_monthly_email_gives_each_lead_the_advice(lead, reservation, february, frozen, mailoutbox):
    lead.email = "leo@example.com"
    lead.save()
    assert spend.email_spend_summaries(now=NOW, base_url="https://portal.example.com") == 1
    [mail] = mailoutbox
    assert mail.subject == "Reservoir: reservation advice for Alpha"
    assert "reserving 6 GPUs would have cost least (you reserve 4)" in mail.body
    assert "a saving of 4,592.00" in mail.body
    assert "https://portal.example.com/billing/teams/alpha/" in mail.body


def _floats(value, path="") -> list[str]:
    """Where a JSON answer holds a float (money and hours must come as strings)."""
    if isinstance(value, dict):
        return [hit for key, item in value.items() for hit in _floats(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [hit for index, item in enumerate(value) for hit in _floats(item, f"{path}[{index}]")]
    return [path] if isinstance(value, float) else []


def test_no_figure_of_the_spend_api_is_a_float(client, lead, reservation, february, metered, frozen):
    client.force_login(lead)
    client.put("/api/v1/spend/alpha/budget/", {"monthly_cap": "1000"}, content_type="application/json")
    data = client.get("/api/v1/spend/alpha/").json()
    assert data["forecast"] and data["advice"] and data["budget"]
    assert _floats(data) == []
    forecast = data["forecast"]
    for name in ("fixed", "variable_so_far", "queued", "expected", "low", "high"):
        assert forecast[name] == f"{Decimal(forecast[name]):.2f}", name  # two decimals, as the invoices give
    assert forecast["variable_so_far"] == "85.00" and forecast["queued"] == "0.00"
    assert data["advice"]["advised"]["hours_above_reservation"] == "0.000000"  # hours to six places


def test_a_young_team_is_forecast_from_its_own_days_only(team, reserved_pool, frozen):
    """A team created ten days ago, working inside its reservation: the days before it existed are no history, so
    there are no past windows to calibrate on and the interval is the normal approximation (not 151 "quiet"
    windows of zeros from before the team existed, which made a zero-width interval)."""
    Team.objects.filter(pk=team.pk).update(created_at=at(6, 12))
    team.refresh_from_db()
    ReservationFactory(team=team, pool=reserved_pool, gpus=2, starts_at=at(6, 12), ends_at=at(1, month=4))
    services.refresh_usage(now=NOW)
    result = spend.team_forecast(team=team, now=NOW).forecast
    assert (result.basis, result.samples) == ("normal", 0)
    assert result.days_elapsed == 15  # the month's days so far are all there, those before the team cost nothing


def test_the_history_starts_at_the_first_metered_day_or_the_creation_whichever_is_earlier(team, metered, frozen):
    # The team's first metered day (March 1st, its reservation) comes before the team's row says it was created.
    Team.objects.filter(pk=team.pk).update(created_at=at(10))
    team.refresh_from_db()
    assert spend.history_start(team=team, today=NOW.date()) == at(1).date()
    Team.objects.filter(pk=team.pk).update(created_at=at(1, month=1))
    team.refresh_from_db()
    assert spend.history_start(team=team, today=NOW.date()) == at(1, month=1).date()
    Team.objects.filter(pk=team.pk).update(created_at=at(1, month=1, year=2025))
    team.refresh_from_db()
    assert spend.history_start(team=team, today=NOW.date()) == NOW.date() - timedelta(days=spend.HISTORY_DAYS)


def test_a_month_begun_mid_way_is_not_fitted_as_a_whole_one(team, reserved_pool, pod, frozen):
    """First metered day January 20th: January is not a whole month of history, February is."""
    ReservationFactory(team=team, pool=reserved_pool, gpus=4, starts_at=at(20, month=1), ends_at=at(1, month=4))
    pod(at(20, month=1), at(1, month=3), gpus=6)
    services.refresh_usage(now=NOW)
    assert spend.fitted_months(team=team, pool=reserved_pool, now=NOW) == [at(1, month=2).date()]


def test_the_advice_counts_only_the_pool_it_sizes(team, reservation, february, frozen, elastic_pool, pod):
    """The same February with 2 GPUs more all month in the elastic pool: the A800 reservation's advice is unchanged."""
    pod(at(1, month=2), at(1, month=3), gpus=2, pool=elastic_pool)
    services.refresh_usage(now=NOW)
    advice = spend.team_advice(team=team, now=NOW)
    assert advice.pool.slug == "a800" and advice.advice.advised.reserved_gpus == 6
    assert advice.advice.current.total == Decimal("63392.00")  # as without the elastic pool's GPUs


def test_the_variable_part_so_far_is_what_the_invoice_will_say_not_a_sum_of_rounded_days(
    team, elastic_pool, pod, frozen
):
    """Three seconds of spill a day at 6.50 an hour: 0.0054 a day, 0.08 over fifteen days on the invoice (its line
    sums the seconds first), where rounding each pool-day to the cent first gave 0.15."""
    for day in range(1, 16):
        pod(at(day, 10), at(day, 10) + timedelta(seconds=3), pool=elastic_pool)
    services.refresh_usage(now=NOW)
    lines = services.month_charges(month=date(2026, 3, 1), now=NOW, team_ids=[team.pk])[team.pk]
    invoiced = sum(line.amount for line in lines if line.kind != LineKind.RESERVATION_FEE)
    result = spend.team_forecast(team=team, now=NOW).forecast
    assert invoiced == Decimal("0.08") and result.variable_so_far == invoiced
    assert result.rest_expected < Decimal("0.15")  # the rate too: 14 days of 0.0054, not of 0.01


def test_the_advice_counts_the_months_since_the_team_came_to_the_pool(team, reserved_pool, elastic_pool, pod):
    """Alpha spilled into the elastic pool from November; on February 20th it reserved 6 GPUs of the A800 pool and
    kept them busy. On March 1st no whole month of the A800 pool is behind it: no advice yet, rather than the nine
    days of February weighed against three months of fees (which advised 0 GPUs). On June 1st it is fitted on March
    to May, and sizes the 6 GPUs the team keeps busy."""
    pod(at(1, month=11, year=2025), at(1, 2, month=11, year=2025), pool=elastic_pool)
    ReservationFactory(
        team=team, pool=reserved_pool, gpus=6, starts_at=at(20, month=2), ends_at=at(1, month=12),
        monthly_price_per_gpu=Decimal("9800.00"),
    )  # fmt: skip
    pod(at(20, month=2), None, gpus=6)
    march = at(1, 6, month=3)
    with time_machine.travel(march, tick=False):
        services.refresh_usage(now=march, max_days=400)
        assert spend.fitted_months(team=team, pool=reserved_pool, now=march) == []
        assert spend.team_advice(team=team, now=march) is None
    june = at(1, 6, month=6)
    with time_machine.travel(june, tick=False):
        services.refresh_usage(now=june, max_days=400)
        advice = spend.team_advice(team=team, now=june)
    assert (advice.first_month, advice.months) == (at(1, month=3).date(), 3)
    assert advice.advice.advised.reserved_gpus == 6


def test_a_net_lenders_chart_reaches_below_zero_and_stays_inside(db):
    """A team whose credits exceed its costs: its variable part falls below zero. Every point of the chart stays
    within the plot, and the axis (zero) is drawn above the lowest point."""
    from billing.forecast import forecast_month

    days = [Decimal("-100")] * 10
    forecast = forecast_month(days_in_month=30, days_elapsed=10, fixed=Decimal(0), daily_variable=days * 12)
    chart = spend.forecast_chart(forecast, days, at(1).date())
    points = [tuple(map(Decimal, point.split(","))) for point in chart["spent_points"].split()]
    points += [tuple(map(Decimal, point.split(","))) for point in chart["band_points"].split()]
    ys = [y for _x, y in points] + [chart["expected"]["y1"], chart["expected"]["y2"]]
    assert all(spend.PAD <= y <= spend.HEIGHT - spend.PAD for y in ys), ys
    assert chart["axis_y"] < max(ys)  # zero is above the month's end (-3,000.00)
