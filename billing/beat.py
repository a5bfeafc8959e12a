"""Periodic billing work, merged into the beat schedule by portal/celery.py."""

from celery.schedules import crontab

# The budget's AdmissionCheck answers a waiting Workload within about this many seconds (reconcile/budget.py).
BUDGET_CHECK_SECONDS = 5.0

SCHEDULE = {
    # A run that waited longer than its period (the cluster worker away) is dropped: the next one comes 5 s later.
    "billing-check-budgets": {
        "task": "billing.check_budgets",
        "schedule": BUDGET_CHECK_SECONDS,
        "options": {"expires": BUDGET_CHECK_SECONDS},
    },
    "billing-email-spend-summaries": {
        "task": "billing.email_spend_summaries",
        "schedule": crontab(minute=0, hour=6, day_of_month=1),
    },
    "billing-refresh-usage": {
        "task": "billing.refresh_usage",
        "schedule": crontab(minute="*/10"),
    },
}
