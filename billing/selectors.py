"""Reads of billing: month figures from the daily rollups (never the raw intervals), reports for pages and API.

Every figure is computed here, in Decimal: GPU-hours to six places, utilisation and ratios to four, money to the
cent. Templates only place them (STYLE.md, convention 11).
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db.models import Max, Min
from django.utils.formats import date_format, number_format
from django.utils.translation import gettext as _

from pools.models import ContractChange, Pool
from portal.models import Team

from . import services
from .choices import InvoiceStatus, LineKind
from .models import FIGURE_SUMS, ClosedMonth, DailyUsage, Invoice, InvoicedUsage, InvoiceLine, MeteredDay
from .money import hourly_cost, hours, ratio, round_half_up, to_cents
from .periods import month_bounds, month_of, next_month, seconds
from .prices import month_sums_priced, price_spans

ZERO = Decimal(0)


@dataclass
class Figures:
    """R, U, O and S of one scope (a pool, a team, a day) in exact GPU-seconds, with the derived figures; and
    lending: GPU-seconds lent to other teams, and the overage O split into borrowed from lenders + served by the
    pool's unreserved GPUs."""

    reserved: Decimal = ZERO
    in_reservation: Decimal = ZERO
    overage: Decimal = ZERO
    spill: Decimal = ZERO
    lent: Decimal = ZERO
    borrowed: Decimal = ZERO
    unreserved: Decimal = ZERO

    def add(self, other: "Figures") -> None:
        for name in FIGURE_SUMS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def idle(self) -> Decimal:
        return self.reserved - self.in_reservation

    @property
    def used(self) -> Decimal:
        return self.in_reservation + self.overage + self.spill

    def as_hours(self) -> dict:
        """Every figure in GPU-hours (6 places), utilisation U / R and spill ratio S / usage (4 places, or None)."""
        return {
            "reserved_gpu_hours": hours(self.reserved),
            "in_reservation_gpu_hours": hours(self.in_reservation),
            "overage_gpu_hours": hours(self.overage),
            "spill_gpu_hours": hours(self.spill),
            "idle_gpu_hours": hours(self.idle),
            "lent_gpu_hours": hours(self.lent),
            "borrowed_gpu_hours": hours(self.borrowed),
            "unreserved_gpu_hours": hours(self.unreserved),
            "utilisation": ratio(self.in_reservation, self.reserved),
            "utilisation_percent": percent(ratio(self.in_reservation, self.reserved)),
            "spill_ratio": ratio(self.spill, self.used),
            "spill_ratio_percent": percent(ratio(self.spill, self.used)),
        }


def percent(value: Decimal | None) -> Decimal | None:
    """A ratio as a percentage to one decimal place (half up), or None."""
    return None if value is None else round_half_up(value * 100, 1)


def _figures(row) -> Figures:
    return Figures(**{name: row[name] or ZERO for name in FIGURE_SUMS})


def metered_until(month: date) -> datetime | None:
    """Up to when the month's rollups are metered (the earliest day's metered moment if one lags behind)."""
    days = MeteredDay.objects.filter(day__gte=month, day__lt=next_month(month))
    latest = days.aggregate(at=Max("metered_until"))["at"]
    incomplete = days.filter(complete=False).aggregate(at=Min("metered_until"))["at"]
    return incomplete or latest


# Where a month's GPU-hours come from (`month_rollups`), as exports name it.
AS_METERED = "as_metered"  # an open month: the rollups, kept current by every refresh
AS_INVOICED = "as_invoiced"  # a closed month: the rollups its invoices were made from, kept at its close
AS_METERED_NOW = "as_metered_now"  # a month closed before those were kept: the rollups as metered now


def month_rollups(month: date):
    """The daily rollups a month's figures are read from, and which they are (`AS_*`). A closed month reads those
    its invoices were made from (`InvoicedUsage`), so that its page, exports and usage API keep matching its
    invoices while late usage meters its days again (that usage reaches the money as adjustment lines on a later
    invoice, and the month's own figures as those of the invoice that carries them)."""
    closed = ClosedMonth.objects.filter(month=month).values_list("figures_kept", flat=True).first()
    if closed is None:
        return DailyUsage.objects.all(), AS_METERED
    if closed:
        return InvoicedUsage.objects.all(), AS_INVOICED
    return DailyUsage.objects.all(), AS_METERED_NOW


@dataclass
class TeamMonth:
    team: Team
    month: date
    pools: list[dict]
    totals: dict
    daily: list[dict]
    lines: list
    total: Decimal
    invoice: Invoice | None
    metered_until: datetime | None
    chart: dict = field(default_factory=dict)
    figures: str = AS_METERED  # where the GPU-hours come from (`month_rollups`)

    @property
    def is_closed(self) -> bool:
        return self.invoice is not None and self.invoice.is_closed

    @property
    def credits(self) -> Decimal:
        """What the team earned by lending this month (its lending credit lines, as a positive amount)."""
        return -sum((line.amount for line in self.lines if line.kind == LineKind.LENDING_CREDIT), Decimal("0.00"))


def team_month(*, team: Team, month: date, now: datetime) -> TeamMonth:
    """Everything the team billing page and exports show for one team and month, from rollups and invoices (a
    closed month: those its invoices were made from, `month_rollups`)."""
    rollups, figures_from = month_rollups(month)
    rows = rollups.filter(team=team)
    per_pool = rows.month_sums(month, by=("pool_id",))
    pools = Pool.objects.in_bulk([row["pool_id"] for row in per_pool])
    totals = Figures()
    pool_rows = []
    for row in sorted(per_pool, key=lambda row: pools[row["pool_id"]].name):
        figures = _figures(row)
        totals.add(figures)
        pool = pools[row["pool_id"]]
        pool_rows.append({"pool": pool, "kind": pool.kind, **figures.as_hours()})
    per_day = {row["day"]: _figures(row) for row in rows.month_sums(month, by=("day",))}
    daily = []
    day = month
    while day < next_month(month):
        figures = per_day.get(day, Figures())
        daily.append(
            {"day": day, **figures.as_hours(), "used_gpu_hours": hours(figures.in_reservation + figures.overage)}
        )
        day += timedelta(days=1)
    invoice = Invoice.objects.filter(team=team, month=month).first()
    if invoice is not None:
        lines = list(invoice.lines.select_related("pool").order_by("adjusts_month", "kind", "key"))
        total = invoice.total
    else:
        lines = services.month_charges(month=month, now=now, team_ids=[team.pk]).get(team.pk, [])
        total = sum((line.amount for line in lines), Decimal("0.00"))
    return TeamMonth(
        team=team,
        month=month,
        pools=pool_rows,
        totals=totals.as_hours(),
        daily=daily,
        lines=lines,
        total=total,
        invoice=invoice,
        metered_until=invoice.metered_until if invoice and invoice.is_closed else metered_until(month),
        chart=daily_chart(daily),
        figures=figures_from,
    )


# The chart is an inline SVG; its geometry is computed here so that the template only places numbers.
CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 720, 220, 28


def daily_chart(daily: list[dict]) -> dict:
    """Bars of used (in reservation + overage) and spilled GPU-hours per day, and a step line of reserved."""
    peak = max([max(d["reserved_gpu_hours"], d["used_gpu_hours"] + d["spill_gpu_hours"]) for d in daily] + [Decimal(1)])
    plot_h = CHART_HEIGHT - 2 * CHART_PAD
    slot = Fraction(CHART_WIDTH - 2 * CHART_PAD, max(len(daily), 1))

    def y(value: Decimal) -> Decimal:
        return round_half_up(CHART_HEIGHT - CHART_PAD - Fraction(value) / Fraction(peak) * plot_h, 1)

    def scaled(value: Decimal) -> Decimal:
        return round_half_up(Fraction(value) / Fraction(peak) * plot_h, 1)

    bars, reserved_points = [], []
    for index, d in enumerate(daily):
        x = CHART_PAD + slot * index
        used_h, spill_h = scaled(d["used_gpu_hours"]), scaled(d["spill_gpu_hours"])
        base = Decimal(CHART_HEIGHT - CHART_PAD)
        bars.append(
            {
                "x": round_half_up(x + slot / 8, 1),
                "width": round_half_up(slot * 3 / 4, 1),
                "used_y": base - used_h,
                "used_height": used_h,
                "spill_y": base - used_h - spill_h,
                "spill_height": spill_h,
                "label": f"{d['day']:%d}",
                "label_x": round_half_up(x + slot / 2, 1),
                "title": _("%(day)s: reserved %(reserved)s, used %(used)s, spilled %(spilled)s GPU-hours")
                % {
                    "day": date_format(d["day"], "SHORT_DATE_FORMAT"),
                    "reserved": number_format(d["reserved_gpu_hours"], 2),
                    "used": number_format(d["used_gpu_hours"], 2),
                    "spilled": number_format(d["spill_gpu_hours"], 2),
                },
                "show_label": index % 5 == 0,
            }
        )
        reserved_points.append(f"{round_half_up(x, 1)},{y(d['reserved_gpu_hours'])}")
        reserved_points.append(f"{round_half_up(x + slot, 1)},{y(d['reserved_gpu_hours'])}")
    return {
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "bars": bars,
        "reserved_points": " ".join(reserved_points),
        "axis_y": CHART_HEIGHT - CHART_PAD,
        "label_y": CHART_HEIGHT - 8,
        "peak": peak.quantize(Decimal("0.01")),
        "peak_y": CHART_PAD,
        "pad": CHART_PAD,
        "right": CHART_WIDTH - CHART_PAD,
    }


def months_for(team: Team, *, now: datetime) -> list[date]:
    """Months with something to show for `team`, newest first, always including the current month."""
    first = (
        DailyUsage.objects.filter(team=team).aggregate(day=Min("day"))["day"],
        Invoice.objects.filter(team=team).aggregate(month=Min("month"))["month"],
    )
    current = month_of(now)
    start = min([month_of(value) for value in first if value is not None] + [current])
    months = []
    while start <= current:
        months.append(start)
        start = next_month(start)
    return months[::-1]


def months_for_all(*, now: datetime) -> list[date]:
    """Months with rollups of any team, newest first, always including the current month."""
    first = DailyUsage.objects.aggregate(day=Min("day"))["day"]
    current = month_of(now)
    start = min(month_of(first), current) if first else current
    months = []
    while start <= current:
        months.append(start)
        start = next_month(start)
    return months[::-1]


def closed_invoices(team: Team):
    return Invoice.objects.filter(team=team, status=InvoiceStatus.CLOSED).order_by("-month")


def usage_rows(*, teams, month: date) -> list[dict]:
    """Month figures per team and pool for the API: one dict per (team, pool) with rollups in the month. The
    lending credit is the one invoiced (a closed month's never changes), else lent × the pool's lending price. A
    closed month's figures are those its invoices were made from (`month_rollups`)."""
    rollups, _figures_from = month_rollups(month)
    rows = (
        rollups.filter(team__in=teams)
        .month_sums(month, by=("team_id", "team__slug", "pool_id", "pool__slug", "pool__kind"))
        .order_by("team__slug", "pool__slug")
    )
    invoiced, _prices = _invoiced_credits(month, teams=teams)
    metered = _metered_credits(rollups.filter(team__in=teams), month) if len(invoiced) < len(rows) else {}
    return [
        {
            "team": row["team__slug"],
            "pool": row["pool__slug"],
            "pool_kind": row["pool__kind"],
            "month": f"{month:%Y-%m}",
            **_figures(row).as_hours(),
            "lending_credit": invoiced.get(
                (row["team_id"], row["pool_id"]), metered.get((row["team_id"], row["pool_id"]), Decimal("0.00"))
            ),
        }
        for row in rows
    ]


def _metered_credits(rollups, month: date) -> dict[tuple[int, int], Decimal]:
    """The lending credits of `month` as its invoice will price them, from `rollups`: lent GPU-hours at the lending
    price of the days lent, each stretch of one price to the cent. {(team id, pool id): credit}."""
    credits: dict[tuple[int, int], Decimal] = defaultdict(lambda: Decimal("0.00"))
    for row in month_sums_priced(rollups, month):
        credits[row["team_id"], row["pool_id"]] += hourly_cost(row["lent"] or ZERO, row["price"].lending)
    return dict(credits)


def _lending_prices_on(pools, day: date) -> dict[int, Decimal]:
    """Each pool's lending price per GPU-hour in force on `day` (one query)."""
    return {pool_id: spans[0].lending for pool_id, spans in price_spans(pools, day, day).items()}


def _invoiced_credits(month: date, *, teams=None) -> tuple[dict[tuple[int, int], Decimal], dict[int, Decimal]]:
    """The lending credits invoiced for `month` (its own lines: a closed month's never change, whatever the pool's
    lending price is now): ({(team id, pool id): credit}, {pool id: lending price per GPU-hour}). A pool whose
    lending price changed within the month has a line per stretch of days at one price: the credit is their sum, and
    the price is the one of the month's last stretch invoiced (its key names the latest first day)."""
    lines = InvoiceLine.objects.filter(invoice__month=month, kind=LineKind.LENDING_CREDIT, adjusts_month__isnull=True)
    if teams is not None:
        lines = lines.filter(invoice__team__in=teams)
    credits: dict[tuple[int, int], Decimal] = defaultdict(lambda: Decimal("0.00"))
    last_stretch: dict[int, tuple[str, Decimal]] = {}
    for line in lines.values("invoice__team_id", "pool_id", "key", "amount", "unit_price"):
        credits[line["invoice__team_id"], line["pool_id"]] -= line["amount"]
        # `lending_credit:pool:N` before `lending_credit:pool:N:from:<first day>`, and those in the order of their days
        if line["pool_id"] not in last_stretch or line["key"] > last_stretch[line["pool_id"]][0]:
            last_stretch[line["pool_id"]] = (line["key"], line["unit_price"])
    return dict(credits), {pool_id: price for pool_id, (_key, price) in last_stretch.items()}


def _contracted_gpu_seconds(pools, *, start: datetime, end: datetime) -> dict[int, Decimal]:
    """Per reserved pool of `pools`, its contracted GPUs × seconds over [start, end), as its contract changed
    (`ContractChange`: the latest change at or before each moment, the first before any; a pool without changes
    its `contracted_gpus` throughout), to the microsecond."""
    changes: dict[int, list[ContractChange]] = {}
    for change in ContractChange.objects.filter(pool__in=[pool.pk for pool in pools]).order_by("effective_from", "id"):
        changes.setdefault(change.pool_id, []).append(change)
    result = {}
    for pool in pools:
        if not pool.is_reserved:
            continue
        steps = changes.get(pool.pk) or []
        earlier = [step.contracted_gpus for step in steps if step.effective_from <= start]
        at_start = earlier[-1] if earlier else steps[0].contracted_gpus if steps else pool.contracted_gpus or 0
        levels = [(start, at_start)] + [
            (s.effective_from, s.contracted_gpus) for s in steps if start < s.effective_from < end
        ]
        bounds = [at for at, _gpus in levels[1:]] + [end]
        held = sum(
            gpus * ((upto - at) // timedelta(microseconds=1)) for (at, gpus), upto in zip(levels, bounds, strict=True)
        )
        result[pool.pk] = Decimal(held) / 1_000_000
    return result


def pool_month(*, month: date, now: datetime) -> list[dict]:
    """The admin's pool view: per pool, contracted GPU-hours against GPU-hours used across teams (utilisation),
    idle contracted GPU-hours and what they cost, GPU-hours lent and borrowed from lenders and the credits lenders
    earn (per team, as on their invoices: lent × the pool's lending price, to the cent); and per team R, U, O, S,
    idle, spill ratio, lent and borrowed. A closed month's figures are those its invoices were made from."""
    start, end = month_bounds(month)
    until = min(end, now)
    elapsed = seconds(until - start) if until > start else ZERO
    month_seconds = seconds(end - start)
    rollups, figures_from = month_rollups(month)
    per_team_pool = rollups.month_sums(month)
    by_pool: dict[int, list] = defaultdict(list)
    team_usage: dict[int, Figures] = defaultdict(Figures)
    for row in per_team_pool:
        figures = _figures(row)
        by_pool[row["pool_id"]].append((row["team_id"], figures))
        team_usage[row["team_id"]].add(figures)
    teams = Team.objects.in_bulk({team_id for rows in by_pool.values() for team_id, _f in rows})
    pools = list(Pool.objects.order_by("name"))
    # as the contract was at each moment (changes are kept), not today's contract over the whole month
    contracts = _contracted_gpu_seconds(pools, start=start, end=until) if elapsed else {}
    # a closed month's credits as invoiced (at the lending price of then); an open month's at today's price
    invoiced, invoiced_prices = _invoiced_credits(month) if figures_from != AS_METERED else ({}, {})
    metered = _metered_credits(rollups, month)  # at the prices of the days lent: where nothing was invoiced
    in_force = _lending_prices_on(pools, (until - timedelta(microseconds=1)).date() if elapsed else month)
    report = []
    for pool in pools:
        pool_total = Figures()
        team_rows = []
        # as invoiced, the price of the month's last stretch (the lines say it), else the price in force
        lending_price = invoiced_prices.get(pool.pk, in_force[pool.pk])
        for team_id, figures in sorted(by_pool.get(pool.pk, []), key=lambda item: teams[item[0]].name):
            pool_total.add(figures)
            credit = invoiced.get((team_id, pool.pk))
            team_rows.append(
                {
                    "team": teams[team_id],
                    **figures.as_hours(),
                    "lending_credit": (credit if credit is not None else metered.get((team_id, pool.pk)))
                    if figures.lent
                    else None,
                    "team_spill_ratio": ratio(team_usage[team_id].spill, team_usage[team_id].used),
                    "team_spill_ratio_percent": percent(ratio(team_usage[team_id].spill, team_usage[team_id].used)),
                }
            )
        used = pool_total.in_reservation + pool_total.overage + pool_total.spill
        contracted = contracts.get(pool.pk, ZERO)
        idle = max(contracted - used, ZERO)
        idle_cost = (
            to_cents(Fraction(idle) * Fraction(pool.monthly_price_per_gpu) / Fraction(month_seconds))
            if contracted
            else None
        )
        report.append(
            {
                "pool": pool,
                "contracted_gpu_hours": hours(contracted) if contracted else None,
                "used_gpu_hours": hours(used),
                "reserved_gpu_hours": hours(pool_total.reserved),
                "utilisation": ratio(used, contracted) if contracted else None,
                "utilisation_percent": percent(ratio(used, contracted)) if contracted else None,
                "idle_gpu_hours": hours(idle) if contracted else None,
                "idle_cost": idle_cost,
                "lent_gpu_hours": hours(pool_total.lent),
                "borrowed_gpu_hours": hours(pool_total.borrowed),
                "lending_price": lending_price,
                "lending_credits": sum(
                    (row["lending_credit"] for row in team_rows if row["lending_credit"]), Decimal("0.00")
                ),
                "teams": team_rows,
            }
        )
    return report


def earned_this_month(*, team: Team, now: datetime) -> dict[int, dict]:
    """Per reserved pool where `team` lent GPUs this month (UTC), as metered so far: {pool id: {"pool",
    "lent_gpu_hours", "lending_price", "earned"}}. `earned` is what its invoice's credit line for the pool says
    (lent GPU-hours × the pool's lending price, to the cent), from the same rollups."""
    return {pool_id: row for (_team, pool_id), row in earned_this_month_by_team([team.pk], now=now).items()}


def earned_this_month_by_team(team_ids, *, now: datetime) -> dict[tuple[int, int], dict]:
    """`earned_this_month` for several teams at once (a few queries, whatever the teams): {(team id, pool id): {...}}.
    Each stretch of days is credited at its own lending price; `lending_price` is today's."""
    month, today = month_of(now), now.astimezone(UTC).date()
    rows = month_sums_priced(DailyUsage.objects.filter(team_id__in=team_ids, lent_gpu_seconds__gt=0), month)
    pools = Pool.objects.in_bulk({row["pool_id"] for row in rows})
    in_force = _lending_prices_on(pools.values(), today)
    earned: dict[tuple[int, int], dict] = {}
    for row in rows:  # a stretch of days at one price each
        pool = pools[row["pool_id"]]
        entry = earned.setdefault(
            (row["team_id"], pool.pk),
            {"pool": pool, "lent": ZERO, "lending_price": in_force[pool.pk], "earned": Decimal("0.00")},
        )
        entry["lent"] += row["lent"]
        entry["earned"] += hourly_cost(row["lent"], row["price"].lending)
    return {key: {"lent_gpu_hours": hours(entry.pop("lent")), **entry} for key, entry in earned.items()}


def reservation_earned_this_month(*, reservation, now: datetime) -> Decimal:
    """What `reservation`'s team earned this month by lending in its pool. A team's reservations in one pool are
    metered together (its use fills them as one), so they share this figure."""
    earned = earned_this_month(team=reservation.team, now=now).get(reservation.pool_id)
    return earned["earned"] if earned else Decimal("0.00")
