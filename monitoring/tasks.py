"""Monitoring tasks (queue: default). Thin and idempotent: each step is keyed by its aligned time, evaluation
keeps its state in the Alert rows, a notification is sent at most once."""

import logging

from celery import shared_task

from portal.mail import MAIL_ERRORS
from portal.retry import RetryingTask

from . import services, telemetry

log = logging.getLogger(__name__)
WEBHOOK_ATTEMPTS = 6
ALERT_MAIL_ATTEMPTS = 8


@shared_task(name="monitoring.collect_telemetry", acks_late=True, ignore_result=True)
def collect_telemetry() -> str:
    """Read the current step's DCGM series from Prometheus and roll them up (a failure is recorded, not raised:
    the next step tries again)."""
    run = telemetry.collect()
    return f"{run.at.isoformat()}: {'ok' if run.ok else run.error}"


@shared_task(name="monitoring.evaluate_alerts", acks_late=True, ignore_result=True)
def evaluate_alerts() -> dict:
    return services.evaluate_alerts()


@shared_task(
    base=RetryingTask,
    name="monitoring.send_alert_notification",
    bind=True,
    autoretry_for=(services.WebhookError,),
    max_retries=WEBHOOK_ATTEMPTS - 1,
    retry_backoff=5,
    retry_backoff_max=600,
    retry_jitter=False,
)
def send_alert_notification(self, notification_id: int) -> str:
    """Deliver one notification; a webhook that did not take it is tried again after 5, 10, 20... s (at most 10
    min), 6 attempts in all (portal/retry.py)."""
    final = self.request.retries + 1 >= WEBHOOK_ATTEMPTS
    return services.deliver_notification(notification_id, final_attempt=final)


@shared_task(name="monitoring.resend_alert_notifications", acks_late=True, ignore_result=True)
def resend_alert_notifications() -> int:
    """Every minute (beat.py): send again the webhook notifications whose sending stopped
    (`services.notifications_due_again`)."""
    due = services.notifications_due_again()
    for notification_id in due:
        send_alert_notification.delay(notification_id)
    return len(due)


@shared_task(
    base=RetryingTask,
    name="monitoring.email_alert",
    autoretry_for=MAIL_ERRORS,
    max_retries=ALERT_MAIL_ATTEMPTS - 1,
    ignore_result=True,
)
def email_alert(alert_id: int) -> int:
    """E-mail a firing money alert to its team's leads (monitoring.services.email_alert); a mail server that fails is
    tried again after 2, 4, 8... s with jitter (portal/retry.py), `ALERT_MAIL_ATTEMPTS` in all. No row records the
    mail: a retry sends again to the leads already mailed (at least once), and a message lost with Redis's data is not
    sent again (the alert stays on the billing page, on /alerts/ and goes through the webhook)."""
    return services.email_alert(alert_id)


@shared_task(name="monitoring.prune_telemetry", acks_late=True, ignore_result=True)
def prune_telemetry() -> int:
    return telemetry.prune()
