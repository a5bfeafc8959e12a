"""Alert rule evaluation: the "for" edges, strict thresholds, overrides, stale telemetry, disabled rules,
subjects that disappear, visibility, and webhook delivery failures."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs.models import Pod
from monitoring import services
from monitoring.choices import AlertKind, AlertState, NotificationStatus
from monitoring.models import Alert, AlertNotification, AlertRule, GpuReading, TelemetryRun
from monitoring.rules import Action, RuleBook, decide
from tests.factories import NodeFactory, PoolFactory

TEMPERATURE = AlertKind.GPU_TEMPERATURE_HIGH

NOW = timezone.now().replace(microsecond=0)


@pytest.mark.parametrize(
    ("open_state", "open_since", "holds", "for_seconds", "since", "expected"),
    [
        (None, None, False, 60, None, Action.NOTHING),
        (None, None, True, 60, None, Action.PENDING),
        (None, None, True, 0, None, Action.FIRE),  # no "for": fires at once
        (AlertState.PENDING, NOW - timedelta(seconds=59), True, 60, None, Action.PENDING),
        (AlertState.PENDING, NOW - timedelta(seconds=60), True, 60, None, Action.FIRE),  # exactly "for": fires
        (AlertState.PENDING, NOW - timedelta(seconds=30), False, 60, None, Action.DROP),  # cleared while pending
        (AlertState.FIRING, NOW - timedelta(hours=1), True, 60, None, Action.KEEP_FIRING),
        (AlertState.FIRING, NOW - timedelta(hours=1), False, 60, None, Action.RESOLVE),
        (None, None, True, 180, NOW - timedelta(minutes=10), Action.FIRE),  # the data says since when
        (None, None, True, 180, NOW - timedelta(minutes=1), Action.PENDING),
    ],
)
def test_decide_follows_prometheus_for_semantics(open_state, open_since, holds, for_seconds, since, expected):
    decision = decide(
        open_state=open_state, open_since=open_since, holds=holds, for_seconds=for_seconds, now=NOW, since=since
    )
    assert decision.action == expected


def test_a_pending_alert_keeps_the_time_its_condition_began():
    since = NOW - timedelta(seconds=20)
    decision = decide(open_state=AlertState.PENDING, open_since=since, holds=True, for_seconds=60, now=NOW)
    assert decision.active_since == since


@pytest.mark.django_db
def test_rulebook_prefers_team_then_pool_then_default(team):
    pool = PoolFactory()
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(80), for_seconds=60, pool=pool)
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(75), for_seconds=30, team=team)
    book = RuleBook(AlertRule.objects.all())
    kind = AlertKind.GPU_TEMPERATURE_HIGH
    assert book.for_subject(kind).threshold == Decimal(85)  # the migrated default
    assert book.for_subject(kind, pool_id=pool.pk).threshold == Decimal(80)
    assert book.for_subject(kind, pool_id=pool.pk, team_id=team.pk).threshold == Decimal(75)
    assert book.for_subject(kind, pool_id=pool.pk, team_id=team.pk).for_seconds == 30
    # Comparisons are strict: exactly at the threshold is not a breach.
    assert not book.for_subject(kind).breached(85.0) and book.for_subject(kind).breached(85.1)
    assert book.for_subject(AlertKind.GPU_UTILISATION_LOW).breached(29.9)
    assert not book.for_subject(AlertKind.GPU_UTILISATION_LOW).breached(30.0)


def _reading(node, temperature, *, at, gpu=0, team=None):
    GpuReading.objects.update_or_create(
        node_name=node.name,
        gpu=gpu,
        defaults={"pool": node.pool, "team": team, "temperature_c": temperature, "util_percent": 50, "at": at},
    )
    TelemetryRun.objects.update_or_create(at=at, defaults={"collected_at": at, "ok": True, "gpus": 1})


@pytest.mark.django_db(transaction=True)
def test_temperature_alert_is_pending_then_fires_then_resolves(settings):
    settings.MONITORING_STEP_SECONDS = 60
    node = NodeFactory()
    _reading(node, 90, at=NOW)
    services.evaluate_alerts(now=NOW)
    alert = Alert.objects.get(kind=AlertKind.GPU_TEMPERATURE_HIGH)
    assert alert.state == AlertState.PENDING and alert.fired_at is None
    services.evaluate_alerts(now=NOW + timedelta(seconds=119))
    assert Alert.objects.get(pk=alert.pk).state == AlertState.PENDING
    _reading(node, 93, at=NOW + timedelta(seconds=120))
    services.evaluate_alerts(now=NOW + timedelta(seconds=120))
    alert.refresh_from_db()
    assert alert.state == AlertState.FIRING and alert.peak_value == 93
    _reading(node, 70, at=NOW + timedelta(seconds=180))
    services.evaluate_alerts(now=NOW + timedelta(seconds=180))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED and alert.resolved_at == NOW + timedelta(seconds=180)
    # No webhook configured: both events are recorded as skipped, none lost.
    assert sorted(alert.notifications.values_list("event", "status")) == [
        ("firing", NotificationStatus.SKIPPED),
        ("resolved", NotificationStatus.SKIPPED),
    ]
    # A new breach opens a new alert; the resolved one stays as history.
    _reading(node, 95, at=NOW + timedelta(seconds=240))
    services.evaluate_alerts(now=NOW + timedelta(seconds=240))
    assert Alert.objects.filter(kind=AlertKind.GPU_TEMPERATURE_HIGH).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_breach_that_clears_before_for_never_fires(settings):
    settings.MONITORING_STEP_SECONDS = 60
    node = NodeFactory()
    _reading(node, 90, at=NOW)
    services.evaluate_alerts(now=NOW)
    _reading(node, 60, at=NOW + timedelta(seconds=60))
    services.evaluate_alerts(now=NOW + timedelta(seconds=60))
    assert not Alert.objects.filter(kind=TEMPERATURE).exists()
    assert not AlertNotification.objects.filter(alert__kind=TEMPERATURE).exists()


@pytest.mark.django_db(transaction=True)
def test_stale_telemetry_leaves_gpu_alerts_as_they_are(settings):
    settings.MONITORING_STEP_SECONDS = 60
    node = NodeFactory()
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(85), for_seconds=0)
    _reading(node, 99, at=NOW)
    services.evaluate_alerts(now=NOW)
    assert Alert.objects.get(kind=TEMPERATURE).state == AlertState.FIRING
    # Prometheus stops answering: no step for ten minutes. The alert neither resolves nor changes.
    services.evaluate_alerts(now=NOW + timedelta(minutes=10))
    assert Alert.objects.get(kind=TEMPERATURE).state == AlertState.FIRING


@pytest.mark.django_db(transaction=True)
def test_disabling_a_rule_resolves_its_alerts_and_a_team_override_silences_one_team(settings, team):
    settings.MONITORING_STEP_SECONDS = 60
    node = NodeFactory()
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(85), for_seconds=0)
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(95), for_seconds=0, team=team)
    _reading(node, 90, at=NOW, gpu=0)
    _reading(node, 90, at=NOW, gpu=1, team=team)
    services.evaluate_alerts(now=NOW)
    assert list(Alert.objects.filter(kind=TEMPERATURE).values_list("subject_key", flat=True)) == [f"gpu:{node.name}/0"]
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(85), for_seconds=0, enabled=False)
    services.evaluate_alerts(now=NOW + timedelta(seconds=30))
    assert Alert.objects.get(kind=TEMPERATURE).state == AlertState.RESOLVED


@pytest.mark.django_db(transaction=True)
def test_a_pending_pod_alerts_after_three_minutes_and_resolves_once_scheduled(team):
    pool = PoolFactory()
    pod = Pod.objects.create(
        uid="u1", namespace=team.namespace, name="p1", team=team, pool=pool, gpus=1, phase="Pending",
        created_at=NOW - timedelta(minutes=2),
    )  # fmt: skip
    services.evaluate_alerts(now=NOW)
    assert not Alert.objects.filter(kind=AlertKind.POD_PENDING).exists()
    services.evaluate_alerts(now=NOW + timedelta(minutes=1, seconds=1))
    alert = Alert.objects.get(kind=AlertKind.POD_PENDING)
    assert alert.state == AlertState.FIRING and alert.team == team
    Pod.objects.filter(pk=pod.pk).update(phase="Running", scheduled=True)
    services.evaluate_alerts(now=NOW + timedelta(minutes=2))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED


@pytest.mark.django_db(transaction=True)
def test_a_failing_webhook_is_retried_and_a_refusal_is_final(settings, webhook):
    settings.MONITORING_STEP_SECONDS = 60
    node = NodeFactory()
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(85), for_seconds=0)
    webhook.status = 400
    _reading(node, 99, at=NOW)
    services.evaluate_alerts(now=NOW)
    notification = AlertNotification.objects.get(alert__kind=TEMPERATURE)
    assert notification.status == NotificationStatus.FAILED and notification.attempts == 1
    assert notification.response_status == 400
    assert services.deliver_notification(notification.pk) == NotificationStatus.FAILED  # never sent twice
    assert len(webhook.received) == 1


@pytest.mark.django_db
def test_alerts_of_another_team_answer_404_and_the_badge_counts_what_one_may_see(client, researcher, other_team):
    common = dict(state=AlertState.FIRING, value=90, peak_value=90, threshold=85, summary="s", active_since=NOW,
                  fired_at=NOW, last_evaluated_at=NOW)  # fmt: skip
    theirs = Alert.objects.create(
        kind=AlertKind.GPU_TEMPERATURE_HIGH, subject_key="gpu:x/1", subject="x", team=other_team, **common
    )
    shared = Alert.objects.create(
        kind=AlertKind.GPU_TEMPERATURE_HIGH, subject_key="gpu:x/2", subject="free GPU", **common
    )
    client.force_login(researcher)
    assert client.get(f"/api/v1/alerts/{theirs.pk}/").status_code == 404
    assert client.get(f"/alerts/{theirs.pk}/").status_code == 404
    assert [item["id"] for item in client.get("/api/v1/alerts/").json()["results"]] == [shared.pk]
    page = client.get("/alerts/").content.decode()
    assert "free GPU" in page and ">1</span>" in page  # the nav badge
    fragment = client.get("/alerts/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and "free GPU" in fragment
