"""Usage as metered: one row per GPU pod's stay on a node.

`UsageInterval` is written only by `billing.usage` (the cluster sync records them with `record_usage`; a platform
admin may delete one) and read by metering. A pod's interval is [started_at, ended_at): from when it was bound to
a node to when it terminated; `ended_at` is NULL while it still holds its GPUs. The pod's UID is unique, so a sync
that sees the same pod twice (after its own restart, or a relist) updates the one row instead of counting it
again.
"""

from django.conf import settings
from django.contrib.postgres.indexes import GistIndex
from django.db import models
from django.db.models import F, Func, Q, Sum, Value
from django.utils.translation import gettext_lazy as _

from jobs.models import Words
from pools.models import Pool
from portal.models import Team, TeamScopedQuerySet

from . import wording
from .choices import InvoiceStatus, LineKind, LineUnit, unit_label
from .periods import next_month


class UsageIntervalQuerySet(TeamScopedQuerySet):
    def overlapping(self, starts_at, ends_at) -> "UsageIntervalQuerySet":
        return self.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=starts_at), started_at__lt=ends_at)


class UsageInterval(models.Model):
    """One GPU pod's [started_at, ended_at) on a node of `pool`, holding `gpus` GPUs, attributed to `team`."""

    pod_uid = models.CharField(_("pod UID"), max_length=64, unique=True)
    namespace = models.CharField(_("namespace"), max_length=63)
    pod_name = models.CharField(_("pod"), max_length=253)
    team = models.ForeignKey(
        Team, verbose_name=_("team"), on_delete=models.PROTECT, null=True, blank=True, related_name="usage_intervals"
    )
    pool = models.ForeignKey(Pool, verbose_name=_("pool"), on_delete=models.PROTECT, related_name="usage_intervals")
    node_name = models.CharField(_("node"), max_length=253)
    job = models.ForeignKey(
        "jobs.Job",
        verbose_name=_("job"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="usage_intervals",
    )
    gpus = models.PositiveIntegerField(_("GPUs"))
    started_at = models.DateTimeField(_("started"))
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)

    objects = UsageIntervalQuerySet.as_manager()

    class Meta:
        verbose_name = _("usage interval")
        verbose_name_plural = _("usage intervals")
        ordering = ["-started_at"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gt=0), name="%(app_label)s_%(class)s_gpus_positive"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="%(app_label)s_%(class)s_ends_after_start",
            ),
        ]
        indexes = [
            models.Index(fields=["team", "pool", "started_at"], name="billing_interval_team_pool"),
            models.Index(fields=["pool", "started_at"], name="billing_interval_pool_start"),
            models.Index(fields=["ended_at"], name="billing_interval_ended"),
            # Metering asks "which intervals overlap this day/month?"; a GiST index on the period answers it
            # without scanning every interval that started before the window.
            GistIndex(
                Func(F("started_at"), F("ended_at"), Value("[)"), function="tstzrange"),
                name="billing_interval_period",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pod_name} · {self.gpus} GPUs on {self.node_name}"


GPU_SECONDS = {"max_digits": 24, "decimal_places": 6}
# The figures of a month (or any span of days) summed from the daily rollups, by the names pages, exports, the API,
# alerts and invoices read them under (`DailyUsageQuerySet.month_sums`).
FIGURE_SUMS = {
    "reserved": Sum("reserved_gpu_seconds"),
    "in_reservation": Sum("in_reservation_gpu_seconds"),
    "overage": Sum("overage_gpu_seconds"),
    "spill": Sum("spill_gpu_seconds"),
    "lent": Sum("lent_gpu_seconds"),
    "borrowed": Sum("borrowed_gpu_seconds"),
    "unreserved": Sum("unreserved_gpu_seconds"),
}


class DailyUsageQuerySet(models.QuerySet):
    def month_sums(self, month, *, by=("team_id", "pool_id"), through=None):
        """The month's totals, the one rule: this queryset's rollups of the UTC calendar month `month` (the date of
        its first day), up to the day `through` (included) when given, summed per `by` (fields of the rollup, e.g.
        team and pool, pool, or day) into exact GPU-seconds named as in `FIGURE_SUMS`. Rows come as dicts of `by`
        and the figures, ordered by `by`; a group without rollups is not in the answer. Every page, export, API
        view, alert and invoice that shows a month's figures reads them here."""
        rows = self.filter(day__gte=month, day__lt=next_month(month))
        if through is not None:
            rows = rows.filter(day__lte=through)
        return rows.values(*by).annotate(**FIGURE_SUMS).order_by(*by)


class UsageFigures(models.Model):
    """A team's GPU-seconds in a pool on a day, by kind (PRODUCT.md's R, U, O, S, and lending's split of O): the
    figures `DailyUsage` meters and `InvoicedUsage` keeps as a month was invoiced."""

    reserved_gpu_seconds = models.DecimalField(_("reserved GPU-seconds (R)"), **GPU_SECONDS)
    in_reservation_gpu_seconds = models.DecimalField(_("used in reservation GPU-seconds (U)"), **GPU_SECONDS)
    overage_gpu_seconds = models.DecimalField(_("overage GPU-seconds (O)"), **GPU_SECONDS)
    spill_gpu_seconds = models.DecimalField(_("spill GPU-seconds (S)"), **GPU_SECONDS)
    # Lending (reserved pools): the overage O is split into what the pool's unreserved GPUs served and what was
    # borrowed from other teams' idle reserved GPUs; `lent` is what this team's idle GPUs served to borrowers.
    lent_gpu_seconds = models.DecimalField(_("lent GPU-seconds"), default=0, **GPU_SECONDS)
    borrowed_gpu_seconds = models.DecimalField(_("borrowed GPU-seconds"), default=0, **GPU_SECONDS)
    unreserved_gpu_seconds = models.DecimalField(_("GPU-seconds served by unreserved GPUs"), default=0, **GPU_SECONDS)

    class Meta:
        abstract = True


class DailyUsage(UsageFigures):
    """Metered GPU-seconds of one team in one pool over one UTC day (a rollup of `UsageInterval`s).

    Guarantees: the figures are exact (microsecond timestamps make every GPU-second count a Decimal with at
    most six places) and are recomputed for a whole day at once (`billing.services.recompute_days`: delete and
    insert in one transaction), so recomputing a day always gives the same rows, and the sum of a month's days
    equals the month metered from scratch. A (team, pool, day) without usage or reservation has no row.
    """

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="daily_usage")
    pool = models.ForeignKey(Pool, verbose_name=_("pool"), on_delete=models.CASCADE, related_name="daily_usage")
    day = models.DateField(_("day"))
    computed_at = models.DateTimeField(_("computed at"))

    objects = DailyUsageQuerySet.as_manager()

    class Meta:
        verbose_name = _("daily usage")
        verbose_name_plural = _("daily usage")
        ordering = ["day", "team", "pool"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "pool", "day"], name="%(app_label)s_%(class)s_unique_team_pool_day"
            ),
            models.CheckConstraint(
                condition=Q(reserved_gpu_seconds__gte=0)
                & Q(in_reservation_gpu_seconds__gte=0)
                & Q(overage_gpu_seconds__gte=0)
                & Q(spill_gpu_seconds__gte=0)
                & Q(lent_gpu_seconds__gte=0)
                & Q(borrowed_gpu_seconds__gte=0)
                & Q(unreserved_gpu_seconds__gte=0),
                name="%(app_label)s_%(class)s_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(overage_gpu_seconds=F("borrowed_gpu_seconds") + F("unreserved_gpu_seconds")),
                name="%(app_label)s_%(class)s_overage_is_borrowed_plus_unreserved",
            ),
            models.CheckConstraint(
                condition=Q(in_reservation_gpu_seconds__lte=F("reserved_gpu_seconds")),
                name="%(app_label)s_%(class)s_used_within_reserved",
            ),
        ]
        indexes = [models.Index(fields=["day", "pool"], name="billing_daily_day_pool")]

    def __str__(self) -> str:
        return f"{self.team} · {self.pool} · {self.day}"


class MeteredDay(models.Model):
    """A UTC day whose rollups exist, and up to which moment they were metered.

    A day is *complete* once it was metered with `now` at or after its end; an incomplete day (today, or one a
    refresh has not reached) is metered again by the next refresh.
    """

    day = models.DateField(_("day"), unique=True)
    metered_until = models.DateTimeField(_("metered until"))
    computed_at = models.DateTimeField(_("computed at"))
    complete = models.BooleanField(_("complete"), default=False)

    class Meta:
        verbose_name = _("metered day")
        verbose_name_plural = _("metered days")
        ordering = ["day"]

    def __str__(self) -> str:
        return f"{self.day} ({'complete' if self.complete else 'partial'})"


class StaleDay(models.Model):
    """A day whose rollups no longer match the raw data.

    Rows are written by the services that write what metering reads — usage intervals (`billing.usage`),
    reservations and their lending changes (`pools.services`) — whenever one that covers the day is made, changed
    or deleted, in the same transaction as that change (which days: `billing.stale_days`).
    `billing.services.refresh_usage` takes them and meters those days again.
    """

    day = models.DateField(_("day"), unique=True)

    class Meta:
        verbose_name = _("stale day")
        verbose_name_plural = _("stale days")
        ordering = ["day"]

    def __str__(self) -> str:
        return str(self.day)


class ClosedMonth(models.Model):
    """A billing month that was closed: its invoices are final, later data goes to adjustment lines.

    `needs_reconciling` is set when a day of the month is metered again after the close; the next refresh then
    compares what the month costs now with what was invoiced and writes the difference onto the next invoice.
    """

    month = models.DateField(_("month"), unique=True, help_text=_("The first day of the month."))
    closed_at = models.DateTimeField(_("closed at"))
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("closed by"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    needs_reconciling = models.BooleanField(_("needs reconciling"), default=False)
    # Months closed before the portal kept the figures each invoice was made from have none (`InvoicedUsage`): their
    # pages and exports show the rollups as metered now, and say so.
    figures_kept = models.BooleanField(_("figures kept"), default=False)

    class Meta:
        verbose_name = _("closed month")
        verbose_name_plural = _("closed months")
        ordering = ["-month"]
        constraints = [
            models.CheckConstraint(condition=Q(month__day=1), name="%(app_label)s_%(class)s_month_starts_on_day_1"),
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m}"


class InvoicedUsage(UsageFigures):
    """The daily rollups a closed month's invoices were made from, as they were at its close.

    Late usage meters the month's days again (`DailyUsage` changes) and reaches the money as adjustment lines on a
    later invoice; the closed month's page, exports and usage API keep showing these figures, which its invoices'
    quantities match. Written once, by `billing.services.close_month`, in the transaction that closes the month;
    nothing changes them after.
    """

    # Deleted with their team or pool, as the rollups are; a team or pool that was invoiced cannot be deleted
    # anyway (invoices and their lines protect them).
    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="+")
    pool = models.ForeignKey(Pool, verbose_name=_("pool"), on_delete=models.CASCADE, related_name="+")
    day = models.DateField(_("day"))

    objects = DailyUsageQuerySet.as_manager()

    class Meta:
        verbose_name = _("invoiced usage")
        verbose_name_plural = _("invoiced usage")
        ordering = ["day", "team", "pool"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "pool", "day"], name="%(app_label)s_%(class)s_unique_team_pool_day"
            ),
        ]
        indexes = [models.Index(fields=["day", "pool"], name="billing_invoiced_day_pool")]

    def __str__(self) -> str:
        return f"{self.team} · {self.pool} · {self.day} (invoiced)"


class InvoiceQuerySet(TeamScopedQuerySet):
    """`led_by`: invoices of the teams whose billing `user` may see (their led teams; all for an admin)."""


class Invoice(models.Model):
    """What one team owes for one UTC month.

    A draft while the month is open, rebuilt by every refresh from the rollups; closed when the month is closed.
    Guarantees: one invoice per team and month (so closing twice cannot bill twice), and a closed invoice and its
    lines never change again — database triggers (migration 0003) refuse any update or delete.
    """

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.PROTECT, related_name="invoices")
    month = models.DateField(_("month"), help_text=_("The first day of the month."))
    status = models.CharField(_("status"), max_length=10, choices=InvoiceStatus.choices, default=InvoiceStatus.DRAFT)
    total = models.DecimalField(_("total"), max_digits=14, decimal_places=2, default=0)
    metered_until = models.DateTimeField(_("metered until"))
    computed_at = models.DateTimeField(_("computed at"))
    closed_at = models.DateTimeField(_("closed at"), null=True, blank=True)

    objects = InvoiceQuerySet.as_manager()

    class Meta:
        verbose_name = _("invoice")
        verbose_name_plural = _("invoices")
        ordering = ["-month", "team__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "month"], name="%(app_label)s_%(class)s_unique_team_month"),
            models.CheckConstraint(condition=Q(month__day=1), name="%(app_label)s_%(class)s_month_starts_on_day_1"),
            models.CheckConstraint(
                condition=Q(status__in=InvoiceStatus.values), name="%(app_label)s_%(class)s_valid_status"
            ),
            models.CheckConstraint(
                condition=Q(status=InvoiceStatus.DRAFT, closed_at__isnull=True)
                | Q(status=InvoiceStatus.CLOSED, closed_at__isnull=False),
                name="%(app_label)s_%(class)s_closed_has_closed_at",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} · {self.month:%Y-%m} ({self.get_status_display()})"

    @property
    def is_closed(self) -> bool:
        return self.status == InvoiceStatus.CLOSED


class InvoiceLine(models.Model):
    """One charge on an invoice: a reservation fee, overage or spill in one pool, or an adjustment.

    `key` names what the line charges for (e.g. `overage:pool:3`), so that the lines billed for a month can be
    compared with what the month costs now; an adjustment line carries the month it corrects in
    `adjusts_month` and the same key as the line it corrects.
    """

    invoice = models.ForeignKey(Invoice, verbose_name=_("invoice"), on_delete=models.CASCADE, related_name="lines")
    kind = models.CharField(_("kind"), max_length=20, choices=LineKind.choices)
    key = models.CharField(_("key"), max_length=60)
    pool = models.ForeignKey(
        Pool, verbose_name=_("pool"), on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # No database constraint: the line keeps naming the reservation it billed even if that row is deleted later.
    reservation = models.ForeignKey(
        "pools.Reservation",
        verbose_name=_("reservation"),
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="invoice_lines",
    )
    description = models.CharField(_("description"), max_length=200, help_text=_("In English, as invoiced."))
    description_id = models.CharField(_("description message id"), max_length=200, blank=True)
    description_args = models.JSONField(_("description message arguments"), default=dict, blank=True)
    quantity = models.DecimalField(_("quantity"), max_digits=20, decimal_places=6)
    unit = models.CharField(_("unit"), max_length=20, choices=LineUnit.choices)
    unit_price = models.DecimalField(_("unit price"), max_digits=12, decimal_places=4)
    amount = models.DecimalField(_("amount"), max_digits=14, decimal_places=2)
    adjusts_month = models.DateField(_("adjusts month"), null=True, blank=True)

    class Meta:
        verbose_name = _("invoice line")
        verbose_name_plural = _("invoice lines")
        ordering = ["invoice", "adjusts_month", "kind", "key"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=LineKind.values), name="%(app_label)s_%(class)s_valid_kind"),
            models.CheckConstraint(
                condition=Q(kind=LineKind.ADJUSTMENT, adjusts_month__isnull=False)
                | (~Q(kind=LineKind.ADJUSTMENT) & Q(adjusts_month__isnull=True)),
                name="%(app_label)s_%(class)s_adjustment_names_its_month",
            ),
        ]
        indexes = [models.Index(fields=["adjusts_month", "key"], name="billing_line_adjusts")]

    def __str__(self) -> str:
        return f"{self.description}: {self.amount}"

    @property
    def words(self) -> Words | None:
        """The description as words, its dates in the reader's format (None for lines written before descriptions
        kept their msgid)."""
        return wording.line_words(self.description_id, self.description_args) if self.description_id else None

    @property
    def description_in_words(self) -> str:
        """The description in the active language; the figures are the stored ones, never recomputed."""
        return str(self.words) if self.words else self.description

    @property
    def unit_label(self) -> str:
        return unit_label(self.unit)


class Budget(models.Model):
    """A team's monthly cap on the variable part of its bill: overage and spill at the pools' hourly prices (lending
    credits do not count against it). At 80 % the money alert fires; at 100 % Kueue holds the team's jobs that would
    add variable cost (the portal's AdmissionCheck, `reconcile.budget`) until the month ends, the cap is raised or an
    admin lifts it for a job. Every change is audited (`billing.budget.set_budget`)."""

    team = models.OneToOneField(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="budget")
    monthly_cap = models.DecimalField(_("monthly cap on the variable part"), max_digits=14, decimal_places=2)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("updated by"), on_delete=models.SET_NULL, null=True, blank=True
    )

    class Meta:
        verbose_name = _("budget")
        verbose_name_plural = _("budgets")
        constraints = [
            models.CheckConstraint(condition=Q(monthly_cap__gte=0), name="%(app_label)s_%(class)s_cap_not_negative")
        ]

    def __str__(self) -> str:
        return f"{self.team} · {self.monthly_cap}"


class BudgetLift(models.Model):
    """An admin let one job pass its team's budget for one month (the hard stop no longer holds it)."""

    job = models.ForeignKey("jobs.Job", verbose_name=_("job"), on_delete=models.CASCADE, related_name="budget_lifts")
    month = models.DateField(_("month"))
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("lifted by"), on_delete=models.SET_NULL, null=True, blank=True
    )
    lifted_at = models.DateTimeField(_("lifted at"), auto_now_add=True)
    reason = models.CharField(_("reason"), max_length=300, blank=True)

    class Meta:
        verbose_name = _("budget lift")
        verbose_name_plural = _("budget lifts")
        constraints = [
            models.UniqueConstraint(fields=["job", "month"], name="%(app_label)s_%(class)s_one_per_job_and_month")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} · {self.month:%Y-%m}"
