"""The teams' budgets: how much of the month's variable part each team has spent against its cap, and their writes
(`set_budget`, `lift_budget`: audited, and the cluster told through the outbox).

The variable part a budget caps is what the team's use above its reservations costs this month: overage and spill
GPU-hours at each pool's hourly price, from the daily rollups (`DailyUsageQuerySet.month_sums`), each pool to the
cent as invoiced. Lending credits do not count against it (the cap is on what the team spends, not on its net
bill). The figure lags metering (every few minutes), so a hard stop can let a few minutes of spend pass the cap.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_DOWN, Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from portal import audit, outbox
from portal.models import Team

from .models import Budget, BudgetLift, DailyUsage
from .money import as_text, format_money, hourly_cost
from .periods import month_of
from .prices import month_sums_priced

WARNING_PERCENT = Decimal(80)
ZERO = Decimal("0.00")


@dataclass(frozen=True)
class BudgetStatus:
    team_id: int
    month: date
    cap: Decimal
    spent: Decimal

    @property
    def used_percent(self) -> Decimal:
        if not self.cap:
            return Decimal(100) if self.spent > 0 else Decimal(0)
        # Rounded down: the share shown (and the alert's value) never says more was spent than was; 79.95 % is not
        # yet the 80 % warning.
        return (self.spent * 100 / self.cap).quantize(Decimal("0.1"), rounding=ROUND_DOWN)

    @property
    def reached(self) -> bool:
        """The hard stop holds: the month's variable part has reached the cap."""
        return self.spent >= self.cap

    @property
    def warning(self) -> bool:
        return self.used_percent >= WARNING_PERCENT

    def held_message(self) -> str:
        """What a held Workload says in the cluster (English: what Kueue, kubectl and the sync read)."""
        sign = settings.RESERVOIR_CURRENCY_SIGN
        return (
            f"budget for {self.month:%B} reached: {sign}{format_money_plain(self.spent)} "
            f"of {sign}{format_money_plain(self.cap)}"
        )


def format_money_plain(value: Decimal) -> str:
    """Money grouped by thousands, to the cent, whatever language is active (for the cluster's English text)."""
    return f"{value:,.2f}"


def variable_spent(*, team_ids, month: date) -> dict[int, Decimal]:
    """The month's overage and spill cost per team id (teams without any are left out)."""
    spent: dict[int, Decimal] = defaultdict(lambda: ZERO)
    # as the invoice's overage and spill lines: at the prices of the days used, each stretch of one price rounded
    for row in month_sums_priced(DailyUsage.objects.filter(team_id__in=team_ids), month):
        price = row["price"].hourly
        spent[row["team_id"]] += hourly_cost(row["overage"] or 0, price) + hourly_cost(row["spill"] or 0, price)
    return dict(spent)


def budget_statuses(*, now: datetime, team_ids=None) -> dict[int, BudgetStatus]:
    """Every budget's status this month (UTC), per team id: two queries and the pools'."""
    budgets = Budget.objects.all() if team_ids is None else Budget.objects.filter(team_id__in=team_ids)
    caps = dict(budgets.values_list("team_id", "monthly_cap"))
    if not caps:
        return {}
    month = month_of(now)
    spent = variable_spent(team_ids=list(caps), month=month)
    return {
        team_id: BudgetStatus(team_id=team_id, month=month, cap=cap, spent=spent.get(team_id, ZERO))
        for team_id, cap in caps.items()
    }


def team_budget(*, team, now: datetime) -> BudgetStatus | None:
    return budget_statuses(now=now, team_ids=[team.pk]).get(team.pk)


def lifted_job_ids(*, now: datetime) -> set[int]:
    """The jobs an admin let pass their team's budget this month."""
    return set(BudgetLift.objects.filter(month=month_of(now)).values_list("job_id", flat=True))


def as_data(status: BudgetStatus | None) -> dict | None:
    """A budget's status for the API: money as strings to the cent and the percentage as a string to one place,
    never floats (a Decimal in a plain DRF `Response` would be written as one)."""
    if status is None:
        return None
    return {
        "month": f"{status.month:%Y-%m}",
        "cap": as_text(status.cap),
        "spent": as_text(status.spent),
        "used_percent": as_text(status.used_percent, 1),
        "warning": status.warning,
        "reached": status.reached,
    }


def describe(status: BudgetStatus) -> dict:
    """A budget's status for pages and the API."""
    return {
        "month": f"{status.month:%Y-%m}",
        "cap": status.cap,
        "spent": status.spent,
        "used_percent": status.used_percent,
        "warning": status.warning,
        "reached": status.reached,
        "cap_text": format_money(status.cap),
        "spent_text": format_money(status.spent),
    }


# --- writes -------------------------------------------------------------------------------------------------------


def _budget_changed(*, projection: bool) -> None:
    """In the caller's transaction (the outbox): check the held Workloads at once (`billing.check_budgets`), and
    re-render Kueue's objects when a team's ClusterQueue gains or loses the budget's AdmissionCheck."""
    outbox.send("billing.check_budgets")
    if projection:
        outbox.send("pools.reconcile_kueue")


@transaction.atomic
def set_budget(*, team, monthly_cap: Decimal | None, user, now: datetime) -> Budget | None:
    """Set (or, with None, remove) `team`'s monthly cap on the variable part; audited. A lead of the team or an admin
    may; once the month's spend has reached the cap, only an admin may raise or remove it (else the hard stop would
    be the lead's to undo)."""
    if monthly_cap is not None and monthly_cap < 0:
        raise ValidationError({"monthly_cap": _("A budget cannot be negative.")})
    # The team first, as pools.services.set_quota: a second request setting the first budget waits here, then sees
    # the row the first one committed (a lock on a budget row that does not exist yet would hold nothing back).
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    budget = Budget.objects.select_for_update().filter(team=team).first()
    status = team_budget(team=team, now=now) if budget is not None else None
    raising = budget is not None and (monthly_cap is None or monthly_cap > budget.monthly_cap)
    if status is not None and status.reached and raising and not user.is_admin:
        raise ValidationError(_("The budget for this month is reached: only a platform admin may raise or remove it."))
    before = audit.snapshot(budget)
    if monthly_cap is None:
        if budget is not None:
            budget.delete()
            audit.record(actor=user, action="billing.remove_budget", instance=team, before=before, after=None)
            _budget_changed(projection=True)
        return None
    budget = budget or Budget(team=team)
    budget.monthly_cap = monthly_cap.quantize(Decimal("0.01"))
    budget.updated_by = user
    budget.save()
    audit.record(actor=user, action="billing.set_budget", instance=budget, before=before, after=audit.snapshot(budget))
    _budget_changed(projection=True)  # the flavors checked follow the budget and whether it is reached
    return budget


@transaction.atomic
def lift_budget(*, job, user, now: datetime, reason: str = "") -> BudgetLift:
    """Let `job` pass its team's budget for the rest of this month (a platform admin only); audited."""
    if not user.is_admin:
        raise ValidationError(_("Only a platform admin may lift a budget for a job."))
    lift, created = BudgetLift.objects.get_or_create(
        job=job, month=month_of(now), defaults={"lifted_by": user, "reason": reason[:300]}
    )
    if created:
        audit.record(actor=user, action="billing.lift_budget", instance=lift, before=None, after=audit.snapshot(lift))
        _budget_changed(projection=False)
    return lift
