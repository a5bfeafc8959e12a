"""Settings that metering and billing read as they were at each moment: a reservation's lending, a reserved pool's
contract and a pool's prices.

Each is a row per change with the moment it takes effect; rows are only ever added, so metering a past day again
(a late interval, a recomputed rollup) splits that day's lending as it was then, whatever changed since.
"""

from django.db import models
from django.utils.translation import gettext_lazy as _

from ..choices import Lending


class LendingChange(models.Model):
    """A reservation's lending setting from `effective_from` on (until its next change). The setting at a moment is
    that of the latest change at or before it; before its first change a reservation lends idle GPUs (the
    default). Rows are only ever added."""

    reservation = models.ForeignKey(
        "pools.Reservation", verbose_name=_("reservation"), on_delete=models.CASCADE, related_name="lending_changes"
    )
    lending = models.CharField(_("lending"), max_length=10, choices=Lending.choices)
    protected_gpus = models.PositiveIntegerField(_("protected GPUs"), default=0)
    effective_from = models.DateTimeField(_("effective from"))
    changed_by = models.ForeignKey(
        "portal.User", verbose_name=_("changed by"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        app_label = "pools"
        verbose_name = _("lending change")
        verbose_name_plural = _("lending changes")
        ordering = ["reservation", "effective_from", "id"]
        indexes = [models.Index(fields=["reservation", "effective_from"], name="pools_lending_change_at")]

    def __str__(self) -> str:
        return f"{self.reservation}: {self.get_lending_display()} from {self.effective_from:%Y-%m-%d %H:%M}"


class ContractChange(models.Model):
    """A reserved pool's contracted GPUs from `effective_from` on (until its next change). The contract at a moment
    is that of the latest change at or before it; before its first change, that of the first; a pool without any
    change has `Pool.contracted_gpus` at every moment. `pools.services.save_pool` writes one at a pool's creation and
    at each change of its contract (the first change of a pool that has none also records the contract it replaces,
    from the pool's creation). Rows are only ever added."""

    pool = models.ForeignKey(
        "pools.Pool", verbose_name=_("pool"), on_delete=models.CASCADE, related_name="contract_changes"
    )
    contracted_gpus = models.PositiveIntegerField(_("contracted GPUs"))
    effective_from = models.DateTimeField(_("effective from"))
    changed_by = models.ForeignKey(
        "portal.User", verbose_name=_("changed by"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        app_label = "pools"
        verbose_name = _("contract change")
        verbose_name_plural = _("contract changes")
        ordering = ["pool", "effective_from", "id"]
        indexes = [models.Index(fields=["pool", "effective_from"], name="pools_contract_change_at")]

    def __str__(self) -> str:
        return f"{self.pool}: {self.contracted_gpus} GPUs from {self.effective_from:%Y-%m-%d %H:%M}"


class PriceChange(models.Model):
    """A pool's hourly price and lending share for its usage from the UTC day `effective_from` on (until its next
    change). The prices of a day are those of the latest change on or before it (of several for one day, the last
    written); before its first change, those of the first; a pool without any change has its own fields every day.
    `pools.history.record_prices` writes one at a pool's creation (from that day) and at each change of its prices,
    from the next UTC day: a day's usage is priced once, at the prices in force all that day, and a price never
    changes what was used before it. Rows are only ever added."""

    pool = models.ForeignKey(
        "pools.Pool", verbose_name=_("pool"), on_delete=models.CASCADE, related_name="price_changes"
    )
    hourly_price_per_gpu = models.DecimalField(_("hourly price per GPU"), max_digits=12, decimal_places=4)
    lending_price_share = models.DecimalField(_("lending price share"), max_digits=5, decimal_places=4)
    effective_from = models.DateField(_("effective from (UTC day)"))
    changed_by = models.ForeignKey(
        "portal.User", verbose_name=_("changed by"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    recorded_at = models.DateTimeField(_("recorded at"), auto_now_add=True)

    class Meta:
        app_label = "pools"
        verbose_name = _("price change")
        verbose_name_plural = _("price changes")
        ordering = ["pool", "effective_from", "id"]
        indexes = [models.Index(fields=["pool", "effective_from"], name="pools_price_change_at")]

    def __str__(self) -> str:
        return f"{self.pool}: {self.hourly_price_per_gpu} per GPU-hour from {self.effective_from:%Y-%m-%d}"
