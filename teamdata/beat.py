"""Periodic work of the teamdata app (merged into Celery beat by portal/celery.py)."""

SCHEDULE = {
    # A run that waited longer than its period (the cluster worker away) is dropped: the next one comes 30 s later.
    "teamdata-refresh-volumes": {"task": "teamdata.refresh_volumes", "schedule": 30.0, "options": {"expires": 30}},
}
