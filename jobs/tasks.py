"""Job tasks of the domain (queue: cluster; the job e-mails: default). The tasks that create and delete Jobs in the
cluster, and convergence, are reconcilers (reconcile/tasks.py, reconcile/jobs.py)."""

from celery import shared_task

from portal.mail import MAIL_ERRORS
from portal.retry import RetryingTask

# Sends of one job e-mail tried in all while the mail server fails (over about 4 minutes at most, with the backoff);
# then its row is left unsent with the error (Django admin lists job e-mails).
MAIL_ATTEMPTS = 8


@shared_task(name="jobs.spill_stuck_jobs", acks_late=True)
def spill_stuck_jobs() -> list[int]:
    from .spill import spill_due_jobs

    return spill_due_jobs()


@shared_task(name="jobs.record_quotes", acks_late=True)
def record_quotes() -> int:
    from .services import record_quotes as record

    return record()


@shared_task(
    base=RetryingTask,
    name="jobs.send_job_mail",
    autoretry_for=MAIL_ERRORS,
    max_retries=MAIL_ATTEMPTS - 1,
    ignore_result=True,
)
def send_job_mail(notification_id: int) -> str:
    """E-mail a job's submitter about one transition, at most once (jobs/notifications.py); a mail server that fails
    is tried again after 2, 4, 8... s with jitter (portal/retry.py), `MAIL_ATTEMPTS` in all."""
    from .notifications import send

    return send(notification_id)


@shared_task(name="jobs.resend_job_mails", acks_late=True, ignore_result=True)
def resend_job_mails() -> int:
    """Every minute (beat.py): send again the job e-mails whose sending stopped (`notifications.due_again`)."""
    from .notifications import due_again

    due = due_again()
    for notification_id in due:
        send_job_mail.delay(notification_id)
    return len(due)
