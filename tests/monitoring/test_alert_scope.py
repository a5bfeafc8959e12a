"""Alerts and alert rules are scoped like everything else (issue 15): another team's overrides are not listed, an
alert about another team's job is not shown, and `?job=` answers the same for a job one may not see and a job
that does not exist."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from monitoring.choices import AlertKind, AlertState
from monitoring.models import Alert, AlertRule
from tests.factories import JobFactory, PoolFactory

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
COMMON = dict(state=AlertState.FIRING, value=90, peak_value=90, threshold=85, summary="s", active_since=NOW,
              fired_at=NOW, last_evaluated_at=NOW)  # fmt: skip


@pytest.fixture
def pool(db):
    return PoolFactory(slug="train", name="Train Pool")


def test_the_rules_table_lists_defaults_pools_and_only_the_viewers_teams(client, researcher, team, other_team, pool):
    AlertRule.objects.create(kind=AlertKind.QUEUE_WAIT, team=team, threshold=Decimal("11"), for_seconds=0)
    AlertRule.objects.create(kind=AlertKind.QUEUE_WAIT, team=other_team, threshold=Decimal("77"), for_seconds=0)
    AlertRule.objects.create(kind=AlertKind.QUEUE_WAIT, pool=pool, threshold=Decimal("33"), for_seconds=0)
    client.force_login(researcher)
    rules = client.get("/alerts/").context["rules"]
    scopes = [rule.scope for rule in rules if rule.kind == AlertKind.QUEUE_WAIT]
    assert "default" in scopes
    assert any("Alpha" in scope for scope in scopes) and any("Train Pool" in scope for scope in scopes)
    assert not any("Beta" in scope for scope in scopes)
    assert "Beta" not in client.get("/alerts/").content.decode()


def test_the_job_filter_answers_alike_for_invisible_and_missing_jobs(client, researcher, outsider, other_team, pool):
    theirs = JobFactory(team=other_team, pool=pool, submitted_by=outsider)
    Alert.objects.create(
        kind=AlertKind.QUEUE_WAIT, subject_key=f"job:{theirs.pk}", subject="x", team=other_team, job=theirs, **COMMON
    )
    client.force_login(researcher)
    invisible = client.get(f"/api/v1/alerts/?job={theirs.pk}")
    missing = client.get(f"/api/v1/alerts/?job={theirs.pk + 1000}")
    assert invisible.status_code == missing.status_code == 200
    assert invisible.json() == missing.json()
    assert invisible.json()["results"] == []


def test_an_alert_about_another_teams_job_is_hidden_even_without_a_team(client, researcher, outsider, other_team, pool):
    theirs = JobFactory(team=other_team, pool=pool, submitted_by=outsider)
    alert = Alert.objects.create(
        kind=AlertKind.GPU_TEMPERATURE_HIGH, subject_key="gpu:n/0", subject="GPU 0 of n", job=theirs, **COMMON
    )
    client.force_login(researcher)
    assert client.get(f"/api/v1/alerts/{alert.pk}/").status_code == 404
    assert client.get("/api/v1/alerts/").json()["results"] == []
    client.force_login(outsider)
    assert client.get(f"/api/v1/alerts/{alert.pk}/").status_code == 200
