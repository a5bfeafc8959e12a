"""Once a team's budget is reached the cluster holds its queued jobs that would spend beyond the reservation (the page
says so: "jobs that would run on elastic or shared GPUs wait ... until the cap is raised, the month ends or an admin
lets a job pass"). Leads saw the forecast on the same page count those very jobs as certain to run (130.00 of queued
spill as a floor under the rest). Held jobs are now left out, and the forecast says so; a job an admin lifted still
counts."""

from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing import services, spend
from billing.budget import lift_budget, set_budget, team_budget
from jobs.choices import JobState
from tests.billing.conftest import at
from tests.factories import JobFactory

NOW = at(16, 12)
HELD_WORDS = "The budget is reached: the queued jobs it holds are left out, unless an admin lets them pass."


@pytest.fixture
def reached(team, lead, reservation, pod, elastic_pool):
    """85.00 of variable spend against a 50.00 cap, and 2 GPUs × 10 h queued on the elastic pool (130.00 of spill)."""
    pod(at(2, 10), at(2, 12), gpus=6)  # overage 4 GPU-hours × 18.00 = 72.00
    pod(at(3, 0), at(3, 2), gpus=1, pool=elastic_pool)  # spill 2 GPU-hours × 6.50 = 13.00
    with time_machine.travel(NOW, tick=False):
        services.refresh_usage(now=NOW)
        set_budget(team=team, monthly_cap=Decimal("50.00"), user=lead, now=NOW)
        assert team_budget(team=team, now=NOW).reached
        yield JobFactory(team=team, pool=elastic_pool, gpus=2, max_run_minutes=600, state=JobState.QUEUED)


def test_jobs_the_reached_budget_holds_are_not_forecast_to_run(team, reached):
    forecast = spend.team_forecast(team=team, now=NOW, budget=team_budget(team=team, now=NOW)).forecast
    assert forecast.queued == Decimal("0.00")


def test_a_job_an_admin_lets_pass_is_still_forecast_to_run(team, platform_admin, reached):
    lift_budget(job=reached, user=platform_admin, now=NOW)
    forecast = spend.team_forecast(team=team, now=NOW, budget=team_budget(team=team, now=NOW)).forecast
    assert forecast.queued == Decimal("130.00")  # 2 GPUs × 10 h × 6.50


def test_the_page_and_the_api_leave_held_jobs_out_and_the_page_says_so(client, lead, reached):
    client.force_login(lead)
    assert client.get("/api/v1/spend/alpha/").json()["forecast"]["queued"] == "0.00"
    body = client.get(reverse("billing:team_billing", args=["alpha"])).content.decode()
    assert HELD_WORDS in body
