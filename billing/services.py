"""Writes of billing: daily rollups, draft invoices kept current, month close and adjustments.

Usage intervals are recorded by `billing.usage` (the cluster sync calls it), which takes no billing lock: its
writes only mark days stale (and hold those marks' row locks until they commit, which the refresh skips: see
`_take_marks`). Every write here takes one PostgreSQL advisory lock (`_lock`) for its transaction, so a
periodic refresh and a month close never interleave. The flow:

- `recompute_days` meters whole UTC days again from the raw intervals (delete and insert in one transaction).
- `refresh_usage` — the periodic task — meters the days the writers of usage and reservations marked stale
  (`billing.usage.mark_days_stale`) and the days not yet complete, then `refresh_invoices` rebuilds the drafts of
  the open months and turns late changes to closed months into adjustment lines on each team's next invoice.
- `close_month` meters the month once more from scratch, rebuilds its drafts, closes them and keeps the rollups
  they were made from (`InvoicedUsage`); a closed month is recorded once (`ClosedMonth.month` is unique) so closing
  twice does nothing.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Min, Q, Sum
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from jobs.models import Words
from pools.models import Pool, Reservation
from portal import audit

from . import metering, wording
from . import prices as prices_module
from .choices import InvoiceStatus, LineKind, LineUnit, unit_label
from .models import (
    ClosedMonth,
    DailyUsage,
    Invoice,
    InvoicedUsage,
    InvoiceLine,
    MeteredDay,
    StaleDay,
    UsageInterval,
)
from .money import QUANTITY_PLACES, hourly_cost, hours, round_half_up, to_cents
from .periods import days_of, format_month, midnight, month_bounds, month_of, next_month, seconds

logger = logging.getLogger(__name__)

# Any constant shared by the billing writers; pg_advisory_xact_lock takes a bigint.
BILLING_LOCK_ID = 0x62696C6C  # "bill"
DEFAULT_MAX_DAYS_PER_REFRESH = 62
GPU_HOURS = LineUnit.GPU_HOURS.value
GPU_MONTHS = LineUnit.GPU_MONTHS.value


def _lock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [BILLING_LOCK_ID])


# --- rollups ------------------------------------------------------------------------------------------------------

_INSERT_ROLLUPS = """
INSERT INTO billing_dailyusage (team_id, pool_id, day, reserved_gpu_seconds, in_reservation_gpu_seconds,
                                overage_gpu_seconds, spill_gpu_seconds, lent_gpu_seconds, borrowed_gpu_seconds,
                                unreserved_gpu_seconds, computed_at)
SELECT team_id, pool_id, bucket, reserved, in_reservation, overage, spill, lent, borrowed, unreserved, %(computed_at)s
FROM ({metering}) metered
WHERE reserved > 0 OR in_reservation > 0 OR overage > 0 OR spill > 0 OR lent > 0
"""


def _contiguous_runs(days: list[date]) -> list[tuple[date, date]]:
    """`days` (sorted) as runs of consecutive days, each metered in one query: at most MAX_PERIOD's days each, the
    longest period the metering query orders correctly (billing/metering.py). Pure."""
    longest = metering.MAX_PERIOD.days
    runs: list[tuple[date, date]] = []
    for day in days:
        if runs and runs[-1][1] + timedelta(days=1) == day and (day - runs[-1][0]).days < longest:
            runs[-1] = (runs[-1][0], day)
        else:
            runs.append((day, day))
    return runs


@transaction.atomic
def recompute_days(*, days, now: datetime) -> list[date]:
    """Meter each of `days` again from the raw intervals; returns the days metered.

    Guarantees: a day's rollups are replaced whole in one transaction (readers see the old or the new day, never
    half of it); the result depends only on the intervals, the reservations and `now`, so recomputing a day gives
    the same rows. Days that have not started by `now` are skipped; today is metered up to `now` and stays
    incomplete. Recomputing a day of a closed month flags that month for reconciling.
    """
    _lock()
    wanted = sorted({day for day in days if midnight(day) < now})
    sql = _INSERT_ROLLUPS.format(metering=metering.metering_sql(by_day=True))
    with connection.cursor() as cursor:
        metering.prepare_session(cursor)
        for first, last in _contiguous_runs(wanted):
            start, end = midnight(first), min(midnight(last + timedelta(days=1)), now)
            DailyUsage.objects.filter(day__gte=first, day__lte=last).delete()
            cursor.execute(sql, {"start": start, "end": end, "now": now, "computed_at": now})
    for day in wanted:
        day_end = midnight(day + timedelta(days=1))
        MeteredDay.objects.update_or_create(
            day=day,
            defaults={"metered_until": min(day_end, now), "computed_at": now, "complete": now >= day_end},
        )
    months = {month_of(day) for day in wanted}
    ClosedMonth.objects.filter(month__in=months, needs_reconciling=False).update(needs_reconciling=True)
    return wanted


def first_open_month(*, now: datetime) -> date:
    """The oldest month not closed yet: the month after the last close, else the month of the oldest data."""
    current = month_of(now)
    last_closed = ClosedMonth.objects.order_by("-month").values_list("month", flat=True).first()
    if last_closed is not None:
        return min(next_month(last_closed), current)
    oldest = [
        UsageInterval.objects.filter(team__isnull=False).aggregate(at=Min("started_at"))["at"],
        Reservation.objects.aggregate(at=Min("starts_at"))["at"],
    ]
    oldest = [month_of(moment) for moment in oldest if moment is not None]
    return min([*oldest, current])


def _take_marks(days: list[date]) -> None:
    """Delete the stale marks of `days` that no writer holds, before those days are metered.

    A writer of usage marks a day and holds the mark's row lock until it commits (`billing.usage.mark_days_stale`),
    and under READ COMMITTED the metering that follows cannot see that writer's rows yet. So a held mark is left
    where it is (`SKIP LOCKED`: the refresh never waits for the sync) and the next refresh meters the day again,
    once the writer has committed; a day of a closed month then becomes an adjustment. A writer that comes to a
    mark after this has locked it waits for this transaction and marks the day anew. Either way the day is metered
    after the writer's rows are visible, and the marks are taken without waiting on anyone."""
    taken = list(StaleDay.objects.select_for_update(skip_locked=True).filter(day__in=days).values_list("pk", flat=True))
    StaleDay.objects.filter(pk__in=taken).delete()


@dataclass
class RefreshResult:
    days: list[date] = field(default_factory=list)
    invoices: int = 0
    more_days_pending: bool = False


@transaction.atomic
def refresh_usage(*, now: datetime, max_days: int = DEFAULT_MAX_DAYS_PER_REFRESH) -> RefreshResult:
    """Bring rollups and invoices up to `now`: the periodic task.

    Meters again (oldest first, at most `max_days` per call so one run stays short) every day marked stale
    (`StaleDay`) and every day of the open months that is not complete, then rebuilds the draft invoices and writes
    adjustments for closed months whose days changed. Safe to run at any time and any number of times.
    """
    _lock()
    today = now.date()
    open_from = first_open_month(now=now)
    complete = set(MeteredDay.objects.filter(day__gte=open_from, complete=True).values_list("day", flat=True))
    pending = {day for day in days_of(open_from, today) if day not in complete}
    stale = set(StaleDay.objects.filter(day__lte=today).values_list("day", flat=True))
    todo = sorted(pending | stale)
    batch = todo[:max_days]
    _take_marks(batch)
    result = RefreshResult(days=recompute_days(days=batch, now=now), more_days_pending=len(todo) > len(batch))
    result.invoices = refresh_invoices(now=now)
    return result


# --- charges ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Charge:
    """One invoice line as computed now (not yet stored). `description` is the English text of `words` (or, for a
    line that corrects one written before descriptions kept their words, the text it corrects)."""

    key: str
    kind: str
    pool_id: int | None
    reservation_id: int | None
    description: str
    quantity: Decimal
    unit: str
    unit_price: Decimal
    amount: Decimal
    words: Words | None = None

    @property
    def description_in_words(self) -> str:
        return str(wording.line_words(self.words.msgid, self.words.stored_args)) if self.words else self.description

    @property
    def unit_label(self) -> str:
        return unit_label(self.unit)


def _described(words: Words | str) -> dict:
    """Charge fields for a description given as words (or as stored text)."""
    if isinstance(words, Words):
        return {"description": words.english(), "words": words}
    return {"description": words, "words": None}


def month_usage_seconds(*, month: date, team_ids: list[int] | None = None) -> dict[tuple[int, int], dict]:
    """Σ of the month's daily rollups per (team id, pool id) (`DailyUsageQuerySet.month_sums`): exact GPU-seconds R,
    U, O, S, lent, borrowed and served by unreserved GPUs."""
    rows = DailyUsage.objects.all() if team_ids is None else DailyUsage.objects.filter(team_id__in=team_ids)
    return {(row["team_id"], row["pool_id"]): row for row in rows.month_sums(month)}


def reservation_fee(reservation: Reservation, *, month: date, until: datetime) -> tuple[Fraction, Decimal]:
    """(GPU-months as an exact fraction, fee to the cent) of `reservation` in `month`, counted up to `until`.

    Fee = monthly price at signing × GPUs × active minutes in the month / minutes in the month. Active minutes
    are exact (a reservation that starts or ends mid-minute counts the fraction of that minute); the fee is
    rounded once, to the cent, half up.
    """
    start, end = month_bounds(month)
    active = max(Decimal(0), seconds(min(reservation.ends_at, end, until) - max(reservation.starts_at, start)))
    fraction = Fraction(active) / Fraction(seconds(end - start))
    gpu_months = reservation.gpus * fraction
    return gpu_months, to_cents(gpu_months * Fraction(reservation.monthly_price_per_gpu))


def month_charges(
    *, month: date, now: datetime, team_ids: list[int] | None = None, prices: dict | None = None
) -> dict[int, list[Charge]]:
    """The charges of `month` per team id, from the rollups and the reservations, counted up to `now`.

    Reservation fees per reservation; overage (reserved pools, borrowed GPU-hours included: the borrower pays them
    as any overage) and spill (elastic and shared pools) per pool at the pool's hourly price; a credit (negative
    amount) per reserved pool for the GPU-hours the team lent, at the pool's lending price — each at the prices in
    force on the days used (`billing.prices`: a pool whose prices changed within the month has a line per stretch
    of days at one price) — or, for a key found in `prices` ({(team id, key): unit price}), at that price
    (adjustments keep the price the month was invoiced at).
    """
    prices = prices or {}
    start, end = month_bounds(month)
    until = min(end, now)
    charges: dict[int, list[Charge]] = defaultdict(list)
    reservations = Reservation.objects.overlapping(start, until).select_related("pool").order_by("starts_at", "id")
    if team_ids is not None:
        reservations = reservations.filter(team_id__in=team_ids)
    for reservation in reservations:
        gpu_months, fee = reservation_fee(reservation, month=month, until=until)
        charges[reservation.team_id].append(
            Charge(
                key=f"fee:reservation:{reservation.pk}",
                kind=LineKind.RESERVATION_FEE,
                pool_id=reservation.pool_id,
                reservation_id=reservation.pk,
                **_described(
                    Words(
                        wording.RESERVATION_FEE,
                        {
                            "gpus": reservation.gpus,
                            "pool": reservation.pool.name,
                            "start": wording.stored_datetime(max(reservation.starts_at, start)),
                            "end": wording.stored_datetime(min(reservation.ends_at, until)),
                        },
                    )
                ),
                quantity=round_half_up(gpu_months, QUANTITY_PLACES),
                unit=GPU_MONTHS,
                unit_price=reservation.monthly_price_per_gpu,
                amount=fee,
            )
        )
    rollups = DailyUsage.objects.all() if team_ids is None else DailyUsage.objects.filter(team_id__in=team_ids)
    usage = prices_module.month_sums_priced(rollups, month)
    pools = Pool.objects.in_bulk({row["pool_id"] for row in usage})
    for row in sorted(usage, key=lambda row: (row["team_id"], pools[row["pool_id"]].name, row["span"])):
        team_id, pool, price = row["team_id"], pools[row["pool_id"]], row["price"]
        for kind, gpu_seconds, label, default_price, sign in (
            (
                LineKind.OVERAGE,
                row["overage"],
                gettext_noop("Overage above the reservation in %(pool)s"),
                price.hourly,
                1,
            ),
            (LineKind.SPILL, row["spill"], gettext_noop("Spill into %(pool)s"), price.hourly, 1),
            (LineKind.LENDING_CREDIT, row["lent"], wording.LENDING_CREDIT, price.lending, -1),
        ):
            if not gpu_seconds:
                continue
            # a stretch of days at prices that changed within the month is a line of its own, from its first day
            key = f"{kind}:pool:{pool.pk}" + (f":from:{price.first:%Y-%m-%d}" if row["span"] else "")
            unit_price = prices.get((team_id, key), default_price)
            charges[team_id].append(
                Charge(
                    key=key,
                    kind=kind,
                    pool_id=pool.pk,
                    reservation_id=None,
                    **_described(Words(label, {"pool": pool.name})),
                    quantity=hours(gpu_seconds),
                    unit=GPU_HOURS,
                    unit_price=unit_price,
                    amount=sign * hourly_cost(gpu_seconds, unit_price),
                )
            )
    return dict(charges)


# --- invoices -----------------------------------------------------------------------------------------------------


def _line(invoice: Invoice, charge: Charge, *, adjusts_month: date | None = None) -> InvoiceLine:
    return InvoiceLine(
        invoice=invoice,
        kind=LineKind.ADJUSTMENT if adjusts_month else charge.kind,
        key=charge.key,
        pool_id=charge.pool_id,
        reservation_id=charge.reservation_id,
        description=charge.description[:200],
        description_id=charge.words.msgid if charge.words else "",
        description_args=charge.words.stored_args if charge.words else {},
        quantity=charge.quantity,
        unit=charge.unit,
        unit_price=charge.unit_price,
        amount=charge.amount,
        adjusts_month=adjusts_month,
    )


def _draft(*, team_id: int, month: date, now: datetime) -> Invoice:
    invoice, _created = Invoice.objects.select_for_update().get_or_create(
        team_id=team_id,
        month=month,
        defaults={"metered_until": min(month_bounds(month)[1], now), "computed_at": now},
    )
    if invoice.is_closed:  # cannot happen for an open month; the database would refuse the writes anyway
        raise ValidationError(_("The invoice of %(month)s is closed.") % {"month": format_month(month)})
    return invoice


def _update_total(invoice: Invoice, *, now: datetime) -> None:
    invoice.total = invoice.lines.aggregate(total=Sum("amount"))["total"] or Decimal("0.00")
    invoice.metered_until = min(month_bounds(invoice.month)[1], now)
    invoice.computed_at = now
    invoice.save(update_fields=["total", "metered_until", "computed_at"])


def _rebuild_month_drafts(*, month: date, now: datetime) -> set[int]:
    """Replace the regular (non-adjustment) lines of every draft of `month`; returns the team ids invoiced."""
    charges = month_charges(month=month, now=now)
    drafts = {invoice.team_id: invoice for invoice in Invoice.objects.filter(month=month, status=InvoiceStatus.DRAFT)}
    for team_id in charges.keys() | drafts.keys():
        invoice = drafts.get(team_id) or _draft(team_id=team_id, month=month, now=now)
        invoice.lines.filter(adjusts_month__isnull=True).delete()
        InvoiceLine.objects.bulk_create([_line(invoice, charge) for charge in charges.get(team_id, [])])
        _update_total(invoice, now=now)
    return set(charges)


def _billed(*, month: date) -> dict[tuple[int, str], dict]:
    """What has been invoiced for `month` per (team id, key): its own lines plus adjustments already closed."""
    lines = InvoiceLine.objects.filter(
        Q(invoice__month=month, adjusts_month__isnull=True)
        | Q(adjusts_month=month, invoice__status=InvoiceStatus.CLOSED)
    ).values(
        "invoice__team_id",
        "key",
        "kind",
        "pool_id",
        "reservation_id",
        "unit",
        "unit_price",
        "description",
        "description_id",
        "description_args",
    )
    billed: dict[tuple[int, str], dict] = {}
    for row in lines.annotate(amount_sum=Sum("amount"), quantity_sum=Sum("quantity")):
        entry = billed.setdefault((row["invoice__team_id"], row["key"]), {**row, "amount": 0, "quantity": 0})
        entry["amount"] += row["amount_sum"]
        entry["quantity"] += row["quantity_sum"]
        if row["kind"] != LineKind.ADJUSTMENT:
            entry.update(
                kind=row["kind"],
                unit_price=row["unit_price"],
                description=row["description"],
                description_id=row["description_id"],
                description_args=row["description_args"],
            )
    return billed


def _reconcile(*, closed: ClosedMonth, into_month: date, now: datetime) -> None:
    """Write, on each team's draft of `into_month`, what `closed.month` costs now minus what was invoiced for it."""
    month = closed.month
    billed = _billed(month=month)
    prices = {key: entry["unit_price"] for key, entry in billed.items() if entry["unit"] == GPU_HOURS}
    current = {
        (team_id, charge.key): charge
        for team_id, team_charges in month_charges(month=month, now=now, prices=prices).items()
        for charge in team_charges
    }
    adjustments: dict[int, list[Charge]] = defaultdict(list)
    for team_id, key in sorted(current.keys() | billed.keys()):
        now_charge = current.get((team_id, key))
        was = billed.get((team_id, key), {"amount": Decimal(0), "quantity": Decimal(0)})
        amount = (now_charge.amount if now_charge else Decimal(0)) - was["amount"]
        quantity = (now_charge.quantity if now_charge else Decimal(0)) - was["quantity"]
        if not amount and not quantity:
            continue
        template = now_charge or Charge(
            key=key,
            kind=was["kind"],
            pool_id=was["pool_id"],
            reservation_id=was["reservation_id"],
            **_described(
                Words(was["description_id"], was["description_args"]) if was["description_id"] else was["description"]
            ),
            quantity=Decimal(0),
            unit=was["unit"],
            unit_price=was["unit_price"],
            amount=Decimal(0),
        )
        adjustments[team_id].append(
            Charge(
                key=key,
                kind=LineKind.ADJUSTMENT,
                pool_id=template.pool_id,
                reservation_id=template.reservation_id,
                **_described(
                    Words(
                        wording.CORRECTION,
                        {"month": format_month(month), "what": template.words or template.description},
                    )
                ),
                quantity=quantity,
                unit=template.unit,
                unit_price=template.unit_price,
                amount=amount,
            )
        )
    stale_drafts = Invoice.objects.filter(status=InvoiceStatus.DRAFT, lines__adjusts_month=month).distinct()
    for invoice in stale_drafts:
        invoice.lines.filter(adjusts_month=month).delete()
        _update_total(invoice, now=now)
    for team_id, team_adjustments in adjustments.items():
        invoice = _draft(team_id=team_id, month=into_month, now=now)
        InvoiceLine.objects.bulk_create([_line(invoice, charge, adjusts_month=month) for charge in team_adjustments])
        _update_total(invoice, now=now)
    closed.needs_reconciling = False
    closed.save(update_fields=["needs_reconciling"])


@transaction.atomic
def refresh_invoices(*, now: datetime, months: list[date] | None = None) -> int:
    """Rebuild the drafts of the open months (or of `months`) from the rollups and reconcile closed months.

    Guarantees: only drafts are written (closed invoices are refused by the database too); a draft ends up with
    exactly the month's current charges plus the adjustments for closed months that changed since they were
    invoiced; a draft with neither is deleted. Returns the number of drafts kept.
    """
    _lock()
    open_from = first_open_month(now=now)
    if months is None:
        months = []
        month = open_from
        while month <= month_of(now):
            months.append(month)
            month = next_month(month)
    for closed in ClosedMonth.objects.filter(needs_reconciling=True).order_by("month"):
        _reconcile(closed=closed, into_month=open_from, now=now)
    for month in months:
        _rebuild_month_drafts(month=month, now=now)
    Invoice.objects.filter(status=InvoiceStatus.DRAFT, lines__isnull=True).delete()
    return Invoice.objects.filter(status=InvoiceStatus.DRAFT).count()


@dataclass
class CloseResult:
    month: date
    closed_now: bool
    invoices: int


def close_month(*, month: date, now: datetime, user=None, actor_name: str = "") -> CloseResult:
    """Close `month`: meter it once more from the raw intervals, rebuild its drafts and freeze them, keeping the
    rollups they were made from (`InvoicedUsage`: what the closed month's page and exports show from then on). The
    audit names `user`, else `actor_name` (e.g. the command that closed it).

    Idempotent: a month already closed is left as it is (`closed_now` is False). Refuses a month that has not
    ended by `now`, and a month while an earlier month still has draft invoices (months close in order).
    Adjustments for earlier closed months that changed are reconciled first and frozen with this month.
    """
    month = month_of(month)
    if ClosedMonth.objects.filter(month=month).exists():
        return CloseResult(month=month, closed_now=False, invoices=Invoice.objects.filter(month=month).count())
    return _close_month(month=month, now=now, user=user, actor_name=actor_name)


def close_refusal(*, month: date, now: datetime) -> str | None:
    """Why `month` cannot be closed at `now`, or None: it has not ended, or an earlier open month has something to
    invoice (months close in order). `close_month` refuses with it; Django admin says it before queueing a close."""
    if now < month_bounds(next_month(month))[0]:
        return _("%(month)s has not ended yet.") % {"month": format_month(month)}
    if (earlier := _earlier_month_to_close(month=month, now=now)) is not None:
        months = {"earlier": format_month(earlier), "month": format_month(month)}
        return _("Close %(earlier)s before %(month)s.") % months
    return None


@transaction.atomic
def _close_month(*, month: date, now: datetime, user, actor_name: str) -> CloseResult:
    _lock()
    closed = ClosedMonth.objects.filter(month=month).first()
    if closed is not None:  # closed by someone else while we waited for the lock
        return CloseResult(month=month, closed_now=False, invoices=Invoice.objects.filter(month=month).count())
    if (refused := close_refusal(month=month, now=now)) is not None:
        raise ValidationError(refused)
    # The open months before it have nothing to invoice: they are closed with it, without invoices. A late change to
    # one of them is then reconciled onto the next invoice like any closed month's; left open, it would stay on a
    # draft of a month before the open ones, billed nowhere.
    empty = first_open_month(now=now)
    while empty < month:
        _close_one(month=empty, now=now, user=user, actor_name=actor_name)
        empty = next_month(empty)
    invoices = _close_one(month=month, now=now, user=user, actor_name=actor_name)
    return CloseResult(month=month, closed_now=True, invoices=invoices)


def _close_one(*, month: date, now: datetime, user, actor_name: str) -> int:
    """Meter `month` once more, put the pending adjustments and its charges on its drafts, close them, keep the
    figures they were made from, and record the close. Returns the number of invoices closed."""
    days = days_of(month, next_month(month) - timedelta(days=1))
    _take_marks(days)
    recompute_days(days=days, now=now)
    # Reconciled adjustments go onto this month's drafts: it is the oldest open month from now on.
    for pending in ClosedMonth.objects.filter(needs_reconciling=True).order_by("month"):
        _reconcile(closed=pending, into_month=month, now=now)
    _rebuild_month_drafts(month=month, now=now)
    Invoice.objects.filter(month=month, status=InvoiceStatus.DRAFT, lines__isnull=True).delete()
    count = Invoice.objects.filter(month=month, status=InvoiceStatus.DRAFT).update(
        status=InvoiceStatus.CLOSED, closed_at=now
    )
    _keep_invoiced_figures(month)
    closed = ClosedMonth.objects.create(month=month, closed_at=now, closed_by=_actor(user), figures_kept=True)
    audit.record(
        actor=user,
        action="billing.close_month",
        instance=closed,
        before=None,
        after={"month": format_month(month), "invoices": count},
        actor_name=actor_name,
    )
    logger.info("closed %s: %d invoices", format_month(month), count)
    return count


_KEEP_FIGURES = """
INSERT INTO {invoiced} (team_id, pool_id, day, reserved_gpu_seconds, in_reservation_gpu_seconds,
                        overage_gpu_seconds, spill_gpu_seconds, lent_gpu_seconds, borrowed_gpu_seconds,
                        unreserved_gpu_seconds)
SELECT team_id, pool_id, day, reserved_gpu_seconds, in_reservation_gpu_seconds, overage_gpu_seconds,
       spill_gpu_seconds, lent_gpu_seconds, borrowed_gpu_seconds, unreserved_gpu_seconds
FROM {daily} WHERE day >= %(first)s AND day < %(after)s
"""


def _keep_invoiced_figures(month: date) -> None:
    """Copy the month's rollups, just metered and invoiced, into `InvoicedUsage`: what the closed month shows from
    now on, whatever late usage does to `DailyUsage` (in the close's transaction, under the billing lock, so no
    refresh meters a day in between)."""
    sql = _KEEP_FIGURES.format(invoiced=InvoicedUsage._meta.db_table, daily=DailyUsage._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"first": month, "after": next_month(month)})


def _earlier_month_to_close(*, month: date, now: datetime) -> date | None:
    """The oldest open month before `month` that has something to invoice, if any: months close in order."""
    drafts = Invoice.objects.filter(month__lt=month, status=InvoiceStatus.DRAFT).order_by("month")
    earliest_draft = drafts.values_list("month", flat=True).first()
    candidate = first_open_month(now=now)
    while candidate < month:
        if candidate == earliest_draft or month_charges(month=candidate, now=now):
            return candidate
        candidate = next_month(candidate)
    return None


def _actor(user):
    return user if user is not None and user.is_authenticated else None
