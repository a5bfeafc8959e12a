"""Job tasks of the domain (queue: cluster). The tasks that create and delete Jobs in the cluster, and convergence,
are reconcilers (reconcile/tasks.py, reconcile/jobs.py)."""

from celery import shared_task


@shared_task(name="jobs.spill_stuck_jobs", acks_late=True)
def spill_stuck_jobs() -> list[int]:
    from .spill import spill_due_jobs

    return spill_due_jobs()


@shared_task(name="jobs.record_quotes", acks_late=True)
def record_quotes() -> int:
    from .services import record_quotes as record

    return record()
