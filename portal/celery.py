"""The Celery application. Beat schedules live next to their app (`<app>/beat.py`, a `SCHEDULE` dict)."""

import os
from importlib import import_module

from celery import Celery, Task
from celery.signals import beat_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")

app = Celery("reservoir")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

BEAT_APPS = ("pools", "jobs", "billing", "monitoring", "teamdata")


class ClusterTask(Task):
    """The one retry policy for tasks that call the cluster: each cluster call is tried once
    (`cluster.errors.single_attempt`), and a transient failure (unreachable, timeout, 429, 5xx) retries the whole
    task with exponential backoff and jitter, up to `CLUSTER_TASK_MAX_RETRIES`; a verdict (400, 403, 404, 422)
    fails at once. When the task gives up, `gave_up(error, *args)` is called so the task can leave its object in
    a state that says why (a job Failed with the reason)."""

    abstract = True
    acks_late = True
    retry_backoff = 2
    retry_backoff_max = 300
    retry_jitter = True

    @property
    def autoretry_for(self):
        from cluster.errors import TransientClusterError

        return (TransientClusterError,)

    @property
    def max_retries(self) -> int:
        from django.conf import settings

        return settings.CLUSTER_TASK_MAX_RETRIES

    def __call__(self, *args, **kwargs):
        from cluster.errors import single_attempt

        with single_attempt():
            return super().__call__(*args, **kwargs)

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        self.gave_up(exc, *args, **kwargs)

    def gave_up(self, error: BaseException, *args, **kwargs) -> None:
        """Called once the task has failed for good; subclasses record why."""


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
