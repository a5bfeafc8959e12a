from django.db import models
from django.utils.translation import gettext_lazy as _


class Scope(models.TextChoices):
    POOL = "pool", _("Pool")
    TEAM = "team", _("Team")
    JOB = "job", _("Job")


class Severity(models.TextChoices):
    WARNING = "warning", _("Warning")
    CRITICAL = "critical", _("Critical")


class AlertState(models.TextChoices):
    PENDING = "pending", _("Pending")  # the condition holds, its "for" has not passed yet
    FIRING = "firing", _("Firing")
    RESOLVED = "resolved", _("Resolved")


OPEN_STATES = (AlertState.PENDING, AlertState.FIRING)


class AlertKind(models.TextChoices):
    """The alerts of PRODUCT.md ("Alerts") and seed 003, plus the contract-vs-live capacity check."""

    GPU_UTILISATION_LOW = "gpu_utilisation_low", _("GPU utilisation low")
    GPU_UTILISATION_HIGH = "gpu_utilisation_high", _("GPU utilisation high")
    QUEUE_WAIT = "queue_wait", _("Queue wait too long")
    SPILL_RATIO = "spill_ratio", _("Spill ratio high")
    FAILURE_RATE = "failure_rate", _("Job failure rate high")
    POD_PENDING = "pod_pending", _("Pod pending")
    GPU_MEMORY_HIGH = "gpu_memory_high", _("GPU memory high")
    GPU_TEMPERATURE_HIGH = "gpu_temperature_high", _("GPU temperature high")
    RESERVATION_WASTED = "reservation_wasted", _("Reservation idle while the team spills")
    RESERVATION_NOT_LENT = "reservation_not_lent", _("Reservation idle, not lent, while others wait")
    CAPACITY_MISSING = "capacity_missing", _("Paid GPUs missing")
    BUDGET_USED = "budget_used", _("Budget for the variable spend nearly used")


class NotificationStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    SENT = "sent", _("Sent")
    FAILED = "failed", _("Failed")
    SKIPPED = "skipped", _("No webhook configured")
