"""The money alert of budgets (issue 29): a team's variable spend this month at 80 % of its budget fires it, and the
alert goes out as every alert does (the webhook, tests/monitoring/conftest.py's receiver)."""

# ruff: noqa: F811 - the billing world's fixtures (tests/billing/conftest.py) are imported to be used by name

from decimal import Decimal

import time_machine

from billing import services as billing_services
from billing.budget import set_budget
from monitoring import services
from monitoring.choices import AlertKind, AlertState
from monitoring.models import Alert, AlertNotification
from tests.billing.conftest import at, elastic_pool, pod, reservation, reserved_pool  # noqa: F401 - fixtures

NOW = at(16, 12)


def _spend(team, pod, elastic_pool, reservation):
    """Alpha's March so far: 72.00 of overage and 13.00 of spill."""
    pod(at(2, 10), at(2, 12), gpus=6)
    pod(at(3, 0), at(3, 2), gpus=1, pool=elastic_pool)
    with time_machine.travel(NOW, tick=False):
        billing_services.refresh_usage(now=NOW)


def test_the_alert_fires_at_80_percent_of_the_budget_and_is_sent(team, lead, pod, elastic_pool, reservation, webhook):
    _spend(team, pod, elastic_pool, reservation)
    set_budget(team=team, monthly_cap=Decimal("200"), user=lead, now=NOW)  # 42.5 %: quiet
    services.evaluate_alerts(now=NOW)
    assert not Alert.objects.filter(kind=AlertKind.BUDGET_USED).exists()

    set_budget(team=team, monthly_cap=Decimal("106.25"), user=lead, now=NOW)  # exactly 80 %
    services.evaluate_alerts(now=NOW)
    alert = Alert.objects.get(kind=AlertKind.BUDGET_USED)
    assert alert.state == AlertState.FIRING and alert.team == team and alert.value == 80.0
    assert alert.summary == (
        "budget of team Alpha: share of this month's budget spent on the variable part 80 % "
        "(share of this month's budget spent on the variable part ≥ 80 %)"
    )
    assert AlertNotification.objects.get(alert=alert).event == AlertState.FIRING


def test_the_firing_budget_alert_reaches_the_leads_by_email_in_their_language(
    team, lead, pod, elastic_pool, reservation, mailoutbox
):
    from portal.models import OutboxMessage

    lead.email, lead.language = "leo@example.com", "zh-hans"
    lead.save()
    _spend(team, pod, elastic_pool, reservation)
    set_budget(team=team, monthly_cap=Decimal("100"), user=lead, now=NOW)
    services.evaluate_alerts(now=NOW)
    alert = Alert.objects.get(kind=AlertKind.BUDGET_USED)
    assert OutboxMessage.objects.filter(task="monitoring.email_alert", args=[alert.pk]).exists()
    assert services.email_alert(alert.pk) == 1
    [mail] = mailoutbox
    assert mail.to == ["leo@example.com"]
    assert "Alpha" in mail.subject and "预算" in mail.body
    assert "/billing/teams/alpha/" in mail.body


def test_the_worst_share_spent_is_the_highest(team, lead, pod, elastic_pool, reservation):
    """A budget alert fires at or above its share: its worst value is the highest share seen (it kept the lowest)."""
    _spend(team, pod, elastic_pool, reservation)
    set_budget(team=team, monthly_cap=Decimal("100"), user=lead, now=NOW)  # 85 %
    services.evaluate_alerts(now=NOW)
    set_budget(team=team, monthly_cap=Decimal("90"), user=lead, now=NOW)  # 94.4 %
    services.evaluate_alerts(now=NOW)
    alert = Alert.objects.get(kind=AlertKind.BUDGET_USED)
    assert (round(alert.value, 1), round(alert.peak_value, 1)) == (94.4, 94.4)
