from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.choices import JobMail


class JobState(models.TextChoices):
    QUEUED = "queued", _("Queued")
    ADMITTED = "admitted", _("Admitted")
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# States in which Kueue has admitted the job: it holds GPUs of its team's quota (or is about to use them).
ADMITTED_STATES = frozenset({JobState.ADMITTED, JobState.PENDING, JobState.RUNNING})
# States in which the job's batch/v1 Job should exist in the cluster (queued jobs wait there, suspended by Kueue).
ACTIVE_STATES = frozenset({JobState.QUEUED, *ADMITTED_STATES})
# States of a job that has not started running yet: the ones a start-time quote is for.
NOT_STARTED_STATES = frozenset({JobState.QUEUED, JobState.ADMITTED, JobState.PENDING})

# Every edge of the lifecycle (PRODUCT.md): anything not listed here is refused. Admitted, Pending and Running go
# back to Queued when Kueue evicts the job (preempted, or its pods did not all start in time) and requeues it.
TRANSITIONS: dict[str, frozenset[str]] = {
    JobState.QUEUED: frozenset(
        {
            JobState.ADMITTED,
            JobState.PENDING,
            JobState.RUNNING,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
        }
    ),
    JobState.ADMITTED: frozenset(
        {
            JobState.QUEUED,
            JobState.PENDING,
            JobState.RUNNING,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
        }
    ),
    JobState.PENDING: frozenset(
        {JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset(
        {JobState.QUEUED, JobState.PENDING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class Placement(models.TextChoices):
    STRICT = "strict", _("Strict: only the chosen pool")
    SOFT = "soft", _("Soft: prefer the pool, may spill")
    SPILL_AFTER = "spill_after", _("Strict, then soft after N minutes")


class Priority(models.IntegerChoices):
    LOW = 0, _("Low")
    NORMAL = 50, _("Normal")
    HIGH = 100, _("High")


# The transitions a job's submitter may ask to be e-mailed about (`Job.notify`, jobs/notifications.py): the state a
# transition reaches -> the kind of mail. Queued, Admitted and Pending are steps on the way; a cancel is its actor's.
MAIL_FOR_STATE: dict[str, str] = {
    JobState.RUNNING: JobMail.START,
    JobState.SUCCEEDED: JobMail.END,
    JobState.FAILED: JobMail.FAIL,
}
