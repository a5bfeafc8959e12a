"""Periodic monitoring work, merged into the beat schedule by portal/celery.py."""

from celery.schedules import crontab
from django.conf import settings

# A frequent run that waited longer than its period (the worker away) is dropped: the next one reads the same now.
SCHEDULE = {
    "monitoring-collect-telemetry": {
        "task": "monitoring.collect_telemetry",
        "schedule": float(settings.MONITORING_STEP_SECONDS),
        "options": {"expires": float(settings.MONITORING_STEP_SECONDS)},
    },
    "monitoring-evaluate-alerts": {
        "task": "monitoring.evaluate_alerts",
        "schedule": float(settings.MONITORING_EVALUATION_SECONDS),
        "options": {"expires": float(settings.MONITORING_EVALUATION_SECONDS)},
    },
    # Webhook notifications whose task gave up or was lost (monitoring.services.notifications_due_again).
    "monitoring-resend-alert-notifications": {
        "task": "monitoring.resend_alert_notifications",
        "schedule": 60.0,
        "options": {"expires": 60},
    },
    "monitoring-prune-telemetry": {
        "task": "monitoring.prune_telemetry",
        "schedule": crontab(minute=17, hour="*/6"),
    },
}
