"""Team volume tasks (queue: cluster), thin and idempotent: the claim's name is the volume's, so a retried task
finds the claim it made. Secrets have no task: their values must never wait in a queue (teamdata/services.py)."""

from celery import shared_task

from portal.retry import ClusterTask


@shared_task(base=ClusterTask, name="teamdata.ensure_volume")
def ensure_volume(volume_id: int) -> str:
    from . import services
    from .models import TeamVolume

    volume = TeamVolume.objects.select_related("team").filter(pk=volume_id).first()
    if volume is None:
        return "gone"
    return services.ensure_volume(volume)


@shared_task(name="teamdata.refresh_volumes", acks_late=True)
def refresh_volumes() -> int:
    """Periodic: record each registered volume's claim state (bound, pending with why, lost, gone). Its next run
    is its retry."""
    from . import services

    return services.refresh_volumes()
