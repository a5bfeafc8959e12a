"""Periodic billing work, merged into the beat schedule by portal/celery.py."""

from celery.schedules import crontab

SCHEDULE = {
    "billing-refresh-usage": {
        "task": "billing.refresh_usage",
        "schedule": crontab(minute="*/10"),
    },
}
