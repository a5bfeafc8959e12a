"""A webhook notification whose retry was lost is sent again by the periodic work, for a day; then it is failed, saying
so.

Users saw: a webhook answered 503 once, and the retry of `monitoring.send_alert_notification` (a countdown message in
Redis) was lost: Redis restarted without its data, Redis was unreachable when the task published its own retry, or
PostgreSQL failed inside the task. The notification stayed `pending` for good, and the on-call receiver was never told
that a GPU was at 92 °C, that paid GPUs were missing or that a budget was nearly spent. Job e-mails had this safety net
(`jobs.resend_job_mails`); alert notifications now do too (`monitoring.resend_alert_notifications`, every minute).
docs/failures.md: "no outcome depends on anything surviving there [in Redis]"; PRODUCT.md: a restart of Redis loses
nothing.

The first test leaves a firing alert with a pending notification (its first attempt failed an hour ago, its retry
lost) and runs every periodic monitoring task of the beat schedule, as beat would. The controls: a notification tried
a moment ago (its own retries still under way) is left to them, and one pending for more than a day is failed."""

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring import services, telemetry
from monitoring.choices import AlertKind, AlertState, NotificationStatus
from monitoring.models import Alert, AlertNotification
from monitoring.tasks import resend_alert_notifications
from portal import outbox
from portal.celery import collect_beat_schedule

pytestmark = pytest.mark.django_db(transaction=True)


def _firing_alert(since):
    return Alert.objects.create(
        kind=AlertKind.GPU_TEMPERATURE_HIGH,
        subject_key="gpu:node-a/0",
        subject="GPU 0 of node-a",
        state=AlertState.FIRING,
        value=92,
        peak_value=92,
        threshold=85,
        summary="GPU 0 of node-a is at 92 °C",
        active_since=since,
        fired_at=since,
        last_evaluated_at=timezone.now(),
    )


def _pending_notification(*, made, tried=None):
    notification = AlertNotification.objects.create(
        alert=_firing_alert(made),
        event=AlertState.FIRING,
        attempts=1,
        tried_at=tried,
        last_error="HTTP 503: busy",
        response_status=503,
    )
    AlertNotification.objects.filter(pk=notification.pk).update(created_at=made)
    return notification


def test_a_pending_webhook_notification_whose_retry_was_lost_is_delivered_by_the_periodic_work(webhook, monkeypatch):
    now = timezone.now()
    hour_ago = now - timedelta(hours=1)
    notification = _pending_notification(made=hour_ago, tried=hour_ago)
    assert notification.status == NotificationStatus.PENDING  # its retry message was lost with Redis

    # The periodic monitoring work, without Prometheus and without new observations (nothing else changes).
    monkeypatch.setattr(services, "observe_all", lambda now: {})
    monkeypatch.setattr(telemetry, "collect", lambda *a, **k: type("Run", (), {"at": now, "ok": True})())
    names = sorted(
        {entry["task"] for entry in collect_beat_schedule().values() if entry["task"].startswith("monitoring.")}
    )
    assert names  # the schedule has monitoring work
    for name in names:
        outbox.task_named(name).apply()

    notification.refresh_from_db()
    assert notification.status != NotificationStatus.PENDING, "still pending: the receiver is never told"
    assert [payload["status"] for payload in webhook.received] == ["firing"]


def test_a_notification_whose_own_retries_are_under_way_is_left_to_them(webhook):
    notification = _pending_notification(made=timezone.now() - timedelta(hours=1), tried=timezone.now())

    assert resend_alert_notifications.apply().get() == 0

    notification.refresh_from_db()
    assert notification.status == NotificationStatus.PENDING
    assert webhook.received == []


def test_a_notification_pending_for_more_than_a_day_is_failed_saying_so(webhook):
    two_days_ago = timezone.now() - timedelta(days=2)
    notification = _pending_notification(made=two_days_ago, tried=two_days_ago)

    assert resend_alert_notifications.apply().get() == 0

    notification.refresh_from_db()
    assert notification.status == NotificationStatus.FAILED
    assert notification.last_error == "not delivered within a day; last error: HTTP 503: busy"
    assert webhook.received == []
