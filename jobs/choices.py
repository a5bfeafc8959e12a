from django.db import models
from django.utils.translation import gettext_lazy as _


class JobState(models.TextChoices):
    QUEUED = "queued", _("Queued")
    SUBMITTED = "submitted", _("Submitted")
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# States in which a job holds (or is about to hold) GPUs of its team's quota.
ADMITTED_STATES = frozenset({JobState.SUBMITTED, JobState.PENDING, JobState.RUNNING})

# Every edge of the lifecycle (PRODUCT.md): anything not listed here is refused.
TRANSITIONS: dict[str, frozenset[str]] = {
    JobState.QUEUED: frozenset({JobState.SUBMITTED, JobState.CANCELLED, JobState.FAILED}),
    JobState.SUBMITTED: frozenset(
        {JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.PENDING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
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
