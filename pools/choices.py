from django.db import models
from django.utils.translation import gettext_lazy as _


class PoolKind(models.TextChoices):
    RESERVED = "reserved", _("Reserved (monthly)")
    ELASTIC = "elastic", _("Elastic (spot / on-demand)")
    SHARED = "shared", _("Shared")


class TaintEffect(models.TextChoices):
    NO_SCHEDULE = "NoSchedule", "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule", "PreferNoSchedule"
    NO_EXECUTE = "NoExecute", "NoExecute"


class QuotaRequestState(models.TextChoices):
    PENDING = "pending", _("Pending")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")
    WITHDRAWN = "withdrawn", _("Withdrawn")


# Every edge of a quota request's life: a decision is final, anything not listed here is refused.
QUOTA_REQUEST_TRANSITIONS: dict[str, frozenset[str]] = {
    QuotaRequestState.PENDING: frozenset(
        {QuotaRequestState.APPROVED, QuotaRequestState.REJECTED, QuotaRequestState.WITHDRAWN}
    ),
    QuotaRequestState.APPROVED: frozenset(),
    QuotaRequestState.REJECTED: frozenset(),
    QuotaRequestState.WITHDRAWN: frozenset(),
}
