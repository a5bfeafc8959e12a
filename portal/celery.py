"""The Celery application. Beat schedules live next to their app (`<app>/beat.py`, a `SCHEDULE` dict); the retry
policy of every task is in `portal/retry.py`."""

import os
from importlib import import_module

from celery import Celery
from celery.signals import beat_init

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
