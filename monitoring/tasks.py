"""Monitoring tasks (queue: default). Thin and idempotent: each step is keyed by its aligned time, evaluation
keeps its state in the Alert rows, a notification is sent at most once."""

import logging

from celery import shared_task
from django.conf import settings

from . import services, telemetry

log = logging.getLogger(__name__)
WEBHOOK_ATTEMPTS = 6


@shared_task(name="monitoring.collect_telemetry", acks_late=True, ignore_result=True)
def collect_telemetry() -> str:
    """Read the current step's DCGM series from Prometheus and roll them up (a failure is recorded, not raised:
    the next step tries again)."""
    run = telemetry.collect()
    return f"{run.at.isoformat()}: {'ok' if run.ok else run.error}"


@shared_task(name="monitoring.evaluate_alerts", acks_late=True, ignore_result=True)
def evaluate_alerts() -> dict:
    return services.evaluate_alerts()


@shared_task(name="monitoring.send_alert_notification", bind=True, acks_late=True, max_retries=WEBHOOK_ATTEMPTS - 1)
def send_alert_notification(self, notification_id: int) -> str:
    final = self.request.retries + 1 >= WEBHOOK_ATTEMPTS
    try:
        return services.deliver_notification(notification_id, final_attempt=final)
    except services.WebhookError as error:
        if settings.CELERY_TASK_ALWAYS_EAGER:  # tests and eager runs: no waiting between attempts
            raise self.retry(countdown=0, exc=error) from error
        raise self.retry(countdown=min(600, 5 * 2**self.request.retries), exc=error) from error


@shared_task(name="monitoring.prune_telemetry", acks_late=True, ignore_result=True)
def prune_telemetry() -> int:
    return telemetry.prune()
