"""Periodic work of the teamdata app (merged into Celery beat by portal/celery.py)."""

SCHEDULE = {
    "teamdata-refresh-volumes": {"task": "teamdata.refresh_volumes", "schedule": 30.0},
}
