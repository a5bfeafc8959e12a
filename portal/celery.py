"""The Celery application. Beat schedules live next to their app (`<app>/beat.py`, a `SCHEDULE` dict); the retry
policy of every task is in `portal/retry.py`."""

import os
from importlib import import_module

from celery import Celery
from celery.signals import beat_init, task_postrun, task_prerun
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")

app = Celery("reservoir")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

BEAT_APPS = ("pools", "jobs", "billing", "monitoring", "teamdata")


def collect_beat_schedule() -> dict:
    """Merge every app's `beat.SCHEDULE` into one schedule; an app without beat.py has no periodic work."""
    schedule: dict = {}
    for app_label in BEAT_APPS:
        try:
            module = import_module(f"{app_label}.beat")
        except ModuleNotFoundError:
            continue
        schedule.update(module.SCHEDULE)
    return schedule


@app.on_after_finalize.connect
def _install_beat_schedule(sender, **kwargs):
    sender.conf.beat_schedule = {**collect_beat_schedule(), **(sender.conf.beat_schedule or {})}


@beat_init.connect
def _log_schedule(sender=None, **kwargs):
    names = ", ".join(sorted(app.conf.beat_schedule)) or "none"
    print(f"beat schedule: {names}")


@task_prerun.connect
@task_postrun.connect
def _check_database_connections(sender=None, task=None, **kwargs):
    """Around each task, what Django does around each request: drop this thread's database connection when it is
    broken or older than CONN_MAX_AGE, and have the next query check it first (CONN_HEALTH_CHECKS), so a connection
    kept from task to task (CELERY_DB_REUSE_MAX) survives a PostgreSQL restart. Not for eager tasks, which run
    inside their caller's transaction."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    close_old_connections()
