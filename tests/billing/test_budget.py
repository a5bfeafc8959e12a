"""A team's budget on the variable part: what it counts, who may set, raise and lift it (audited), and what the
budget's AdmissionCheck controller answers (reconcile/budget.py `decide`; the cluster side is in
tests/billing/test_cluster_budget.py)."""

from datetime import date
from decimal import Decimal

import pytest
import time_machine
from django.core.exceptions import ValidationError

from billing import services
from billing.budget import BudgetStatus, budget_statuses, lift_budget, set_budget, team_budget
from billing.models import Budget, BudgetLift
from jobs.models import Job
from portal.models import AuditEntry
from reconcile.budget import decide
from tests.billing.conftest import at
from tests.factories import JobFactory

NOW = at(16, 12)


@pytest.fixture
def spent(team, reservation, pod, elastic_pool):
    """Alpha's March so far: overage 4 GPU-hours × 18.00 = 72.00, spill 2 × 6.50 = 13.00: 85.00 variable."""
    pod(at(2, 10), at(2, 12), gpus=6)
    pod(at(3, 0), at(3, 2), gpus=1, pool=elastic_pool)
    with time_machine.travel(NOW, tick=False):
        services.refresh_usage(now=NOW)


def test_the_budget_counts_overage_and_spill_at_the_hourly_prices(team, spent, lead):
    set_budget(team=team, monthly_cap=Decimal("100.00"), user=lead, now=NOW)
    status = team_budget(team=team, now=NOW)
    assert (status.spent, status.cap, status.used_percent) == (Decimal("85.00"), Decimal("100.00"), Decimal("85.0"))
    assert status.warning and not status.reached
    set_budget(team=team, monthly_cap=Decimal("85.00"), user=lead, now=NOW)
    assert team_budget(team=team, now=NOW).reached


def test_setting_a_budget_is_audited_and_asks_for_the_check_and_the_projection(team, lead, spent):
    from portal.models import OutboxMessage

    set_budget(team=team, monthly_cap=Decimal("500"), user=lead, now=NOW)
    entry = AuditEntry.objects.get(action="billing.set_budget")
    assert entry.actor == lead and entry.after["monthly_cap"] == "500.00"
    assert set(OutboxMessage.objects.values_list("task", flat=True)) == {
        "billing.check_budgets",
        "pools.reconcile_kueue",
    }


def test_once_reached_only_an_admin_raises_or_removes_the_cap(team, lead, platform_admin, spent):
    set_budget(team=team, monthly_cap=Decimal("50"), user=lead, now=NOW)
    with pytest.raises(ValidationError):
        set_budget(team=team, monthly_cap=Decimal("200"), user=lead, now=NOW)
    with pytest.raises(ValidationError):
        set_budget(team=team, monthly_cap=None, user=lead, now=NOW)
    set_budget(team=team, monthly_cap=Decimal("40"), user=lead, now=NOW)  # lowering is the lead's
    set_budget(team=team, monthly_cap=Decimal("200"), user=platform_admin, now=NOW)
    assert Budget.objects.get(team=team).monthly_cap == Decimal("200.00")
    assert AuditEntry.objects.filter(action="billing.set_budget").count() == 3  # the refused two left none


def test_only_an_admin_lifts_the_budget_for_a_job_once_a_month(team, lead, platform_admin, elastic_pool):
    job = JobFactory(team=team, pool=elastic_pool)
    with pytest.raises(ValidationError):
        lift_budget(job=job, user=lead, now=NOW)
    lift_budget(job=job, user=platform_admin, now=NOW, reason="deadline")
    lift_budget(job=job, user=platform_admin, now=NOW)
    assert BudgetLift.objects.get().month == date(2026, 3, 1)
    assert AuditEntry.objects.filter(action="billing.lift_budget").count() == 1
    assert Job.objects.filter(budget_lifts__month=date(2026, 3, 1)).get() == job


def test_teams_without_a_budget_have_no_status(team):
    assert budget_statuses(now=NOW) == {}


REACHED = BudgetStatus(team_id=1, month=date(2026, 11, 1), cap=Decimal("1000.00"), spent=Decimal("1234.50"))


def test_the_hold_message_says_the_month_and_both_amounts():
    assert REACHED.held_message() == "budget for November reached: ¥1,234.50 of ¥1,000.00"


def test_the_controller_holds_a_workload_with_quota_when_the_budget_is_reached():
    held = decide(state="Pending", message="", quota_reserved=True, finished=False, hold=REACHED)
    assert held == ("Retry", REACHED.held_message())
    # Requeued without quota, Kueue's own words replace ours: the controller puts them back, keeping the state.
    waiting = decide(
        state="Pending",
        message="Reset to Pending after eviction. Previously: Retry",
        quota_reserved=False,
        finished=False,
        hold=REACHED,
    )
    assert waiting == ("Pending", REACHED.held_message())
    assert (
        decide(state="Pending", message=REACHED.held_message(), quota_reserved=False, finished=False, hold=REACHED)
        is None
    )


def test_the_controller_lets_a_workload_in_within_budget_and_never_evicts():
    assert decide(state="Pending", message="", quota_reserved=True, finished=False, hold=None) == (
        "Ready",
        "within budget",
    )
    assert decide(state="Pending", message="", quota_reserved=False, finished=False, hold=None) is None
    assert decide(state="Ready", message="within budget", quota_reserved=True, finished=False, hold=REACHED) is None
    assert decide(state="Pending", message="", quota_reserved=True, finished=True, hold=REACHED) is None


def test_the_share_spent_is_rounded_down_so_the_warning_waits_for_80_percent():
    almost = BudgetStatus(team_id=1, month=date(2026, 3, 1), cap=Decimal("100.00"), spent=Decimal("79.95"))
    assert almost.used_percent == Decimal("79.9") and not almost.warning
    there = BudgetStatus(team_id=1, month=date(2026, 3, 1), cap=Decimal("100.00"), spent=Decimal("80.00"))
    assert there.used_percent == Decimal("80.0") and there.warning and not there.reached
