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


class Lending(models.TextChoices):
    """What a reservation lends to the other teams of its cohort while its own jobs leave GPUs idle."""

    NONE = "none", _("Lend none")
    IDLE = "idle", _("Lend idle GPUs")
    PROTECT = "protect", _("Lend idle GPUs, keep some always protected")


def lendable_gpus(*, gpus: int, lending: str, protected_gpus: int) -> int:
    """How many of a reservation's `gpus` its team lets others borrow while idle (the ClusterQueue's lendingLimit for
    the pool): none, all, or all but the protected ones."""
    if lending == Lending.NONE:
        return 0
    if lending == Lending.PROTECT:
        return max(0, gpus - protected_gpus)
    return gpus


def lendable_gpus_sql(*, gpus: str, lending: str, protected_gpus: str) -> str:
    """`lendable_gpus` as a SQL expression over the named columns (metering computes it per row in PostgreSQL;
    tests/pools check both agree on every setting)."""
    return (
        f"(CASE {lending} WHEN '{Lending.NONE.value}' THEN 0"
        f" WHEN '{Lending.PROTECT.value}' THEN greatest(0, {gpus} - {protected_gpus}) ELSE {gpus} END)"
    )
