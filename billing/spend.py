"""Reads for a lead steering spend: the month's forecast bill, the cheapest reservation size, and their chart.

The arithmetic is pure and lives beside this (`billing.forecast`, `billing.advice`); this module feeds it from the
database: the variable cost of each day since the team's first metered day or creation (`history_start`) up to the
last day of the month metered whole (`metered_through`: a day the rollups have not reached is not a day without
spend), from the daily rollups (overage and spill at each pool's hourly price, less lent GPU-hours at its lending
price, each pool-day to the cent as invoiced), the month's reservation fees in full
(`services.reservation_fee`), what the reservations starting or ending in the rest of the month change in the cost of
the team's recent use (`reservation_change`), what the team's queued jobs would cost above its idle reserved GPUs, and
how long the team spent at each level of GPUs in use over the last whole months (from the usage intervals, in one
query).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from itertools import accumulate

from django.db import connection
from django.db.models import Min
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from jobs.choices import JobState
from jobs.models import Job
from pools.choices import PoolKind
from pools.models import Pool, Reservation
from portal.models import Team

from . import services
from .advice import Advice, advise
from .budget import lifted_job_ids
from .forecast import RECENT_DAYS, Forecast, forecast_month
from .models import DailyUsage, MeteredDay
from .money import QUANTITY_PLACES, UNIT_PRICE_PLACES, as_text, format_money, hourly_cost, round_half_up
from .periods import SECONDS_PER_HOUR, midnight, month_bounds, month_of, next_month, previous_month
from .prices import Price, price_on, price_spans

HISTORY_DAYS = 180  # the daily costs the forecast calibrates on
FIT_MONTHS = 3  # the whole months the advice is fitted on
ZERO = Decimal(0)
EXACT_PLACES = 6  # a day's variable cost in the forecast's history: a millionth of the currency
RECENT = timedelta(days=RECENT_DAYS)  # the use a reservation starting or ending in the rest is projected from


def variable_costs(*, team: Team, first: date, last: date, month: date) -> tuple[dict[date, Decimal], Decimal]:
    """The variable cost of each day from `first` to `last` (both included; days without rollups cost 0): overage
    and spill at the pool's hourly price, less lent GPU-hours at its lending price, to a millionth (the forecast's
    history: rounding each pool-day to the cent moved a month of small days by cents). And the variable part of
    `month` up to `last` as its invoice gives it (`services.month_charges`): each pool's overage, spill and credit
    summed over the days first, then each line to the cent."""
    costs = {first + timedelta(days=offset): ZERO for offset in range((last - first).days + 1)}
    rows = list(
        DailyUsage.objects.filter(team=team, day__gte=first, day__lte=last).values_list(
            "day", "pool_id", "overage_gpu_seconds", "spill_gpu_seconds", "lent_gpu_seconds"
        )
    )
    pools = Pool.objects.in_bulk({pool_id for _day, pool_id, *_seconds in rows})
    spans = price_spans(pools.values(), first, last)  # each day at its own prices
    month_seconds: dict[tuple[int, Price], list[Decimal]] = {}
    for day, pool_id, overage, spill, lent in rows:
        price = price_on(spans[pool_id], day)
        paid = Fraction(overage + spill) * Fraction(price.hourly)
        credited = Fraction(lent) * Fraction(price.lending)
        costs[day] += round_half_up((paid - credited) / Fraction(SECONDS_PER_HOUR), EXACT_PLACES)
        if day >= month:
            sums = month_seconds.setdefault((pool_id, price), [ZERO, ZERO, ZERO])
            sums[0], sums[1], sums[2] = sums[0] + overage, sums[1] + spill, sums[2] + lent
    so_far = sum(
        (
            hourly_cost(overage, price.hourly) + hourly_cost(spill, price.hourly) - hourly_cost(lent, price.lending)
            for (_pool_id, price), (overage, spill, lent) in month_seconds.items()
        ),
        ZERO,
    )
    return costs, so_far


def month_fixed(*, team: Team, month: date) -> Decimal:
    """The month's reservation fees in full: every reservation of `team` overlapping it, to its end or the month's."""
    start, end = month_bounds(month)
    fees = ZERO
    for reservation in Reservation.objects.overlapping(start, end).filter(team=team).select_related("pool"):
        fees += services.reservation_fee(reservation, month=month, until=end)[1]
    return fees


def queued_cost(*, team: Team, now: datetime, month_end: datetime, budget_reached: bool = False) -> Decimal:
    """What the team's queued jobs would cost above its reservation: oldest first, each takes the idle reserved GPUs
    of its pool that are left, and the rest of its GPUs run at the pool's hourly price for its maximum run time (to
    the month's end at most). An upper estimate: a strict job beyond the reservation may wait instead.

    Once the team's budget is reached (`budget_reached`) the cluster holds every job that would spend beyond the
    reservation (`reconcile/budget.py`) unless an admin lifted it: such a job is left out, and takes no idle GPUs."""
    lifted = lifted_job_ids(now=now) if budget_reached else set()
    reserved: dict[int, int] = defaultdict(int)
    for reservation in Reservation.objects.filter(team=team).active_at(now):
        reserved[reservation.pool_id] += reservation.gpus
    used = Job.objects.filter(team=team).gpus_in_use(pools=list(reserved))
    idle = {pool_id: max(0, gpus - used.get((team.pk, pool_id), 0)) for pool_id, gpus in reserved.items()}
    cost = ZERO
    left = Decimal(max(0, int((month_end - now).total_seconds())))
    for job in Job.objects.filter(team=team, state=JobState.QUEUED).select_related("pool").order_by("created_at", "pk"):
        inside = min(idle.get(job.pool_id, 0), job.total_gpus)
        above = job.total_gpus - inside
        if above and budget_reached and job.pk not in lifted:
            continue  # held by the budget: it runs neither above the reservation nor inside it
        idle[job.pool_id] = idle.get(job.pool_id, 0) - inside
        if above:
            run_seconds = min(Decimal(job.max_run_minutes * 60), left)
            cost += hourly_cost(above * run_seconds, job.pool.hourly_price_per_gpu)
    return cost


def reservation_change(*, team: Team, since: datetime, until: datetime, window_start: datetime) -> Decimal:
    """What the reservations starting or ending within [since, until) change in the cost of the team's recent use.

    Per reserved pool where the team's reservation changes within the rest: the team's use there over the recent
    window [window_start, since) (how long it held each number of GPUs, `usage_levels`) is taken to go on, and each
    stretch of the rest is priced at the overage that use makes above the reservation in force then, less the overage
    it makes above the reservation of the window's end (the recent rate already counts that one), at the pool's
    hourly price. A reservation starting on the 20th so takes the overage it covers off the rest; one ending adds
    the overage the same use will pay. Lending credits and price changes to come are not projected."""
    window = Decimal((since - window_start).total_seconds())
    if window <= 0:
        return ZERO
    last_metered = since - timedelta(microseconds=1)
    reservations = list(
        Reservation.objects.overlapping(last_metered, until).filter(team=team, pool__kind=PoolKind.RESERVED)
    )
    change = ZERO
    for pool in Pool.objects.filter(pk__in={reservation.pool_id for reservation in reservations}):
        held = [reservation for reservation in reservations if reservation.pool_id == pool.pk]
        edges = {since, *(r.starts_at for r in held), *(r.ends_at for r in held)}
        moments = sorted(moment for moment in edges if since <= moment < until)

        def reserved_at(moment: datetime, held=held) -> int:
            return sum(r.gpus for r in held if r.starts_at <= moment < r.ends_at)

        if all(reserved_at(moment) == reserved_at(last_metered) for moment in moments):
            continue  # the reservation of the window's end holds all the rest: the recent rate already says it
        levels = usage_levels(team=team, pool=pool, start=window_start, end=since)

        def overage_per_second(reserved: int, levels=levels) -> Decimal:
            return sum((max(0, gpus - reserved) * seconds for gpus, seconds in levels.items()), ZERO) / window

        before = overage_per_second(reserved_at(last_metered))
        gpu_seconds = sum(
            (
                (overage_per_second(reserved_at(start)) - before) * Decimal((end - start).total_seconds())
                for start, end in zip(moments, [*moments[1:], until], strict=True)
            ),
            ZERO,
        )
        change += gpu_seconds * pool.hourly_price_per_gpu / SECONDS_PER_HOUR
    return change


def history_start(*, team: Team, today: date) -> date:
    """The first day of the history the forecast calibrates on: the team's first metered day or its creation,
    whichever is earlier, but no more than HISTORY_DAYS ago. Days before the team existed are no history: filled
    with zeros, a young team had a hundred "quiet" windows that were never quiet, only absent, and an interval of
    width zero; from its own days it has too few windows and gets the normal approximation, as documented. The
    month's own days are always there (the forecast counts the month so far from them): those before the team
    existed cost nothing."""
    first_metered = DailyUsage.objects.filter(team=team).aggregate(day=Min("day"))["day"]
    created = team.created_at.astimezone(UTC).date()
    first = min(created, first_metered) if first_metered is not None else created
    return max(today - timedelta(days=HISTORY_DAYS), min(first, month_of(today)))


def metered_through(*, month: date, today: date) -> date:
    """The last day of `month` before `today` up to which every day of the month is metered whole (`MeteredDay`
    complete); the day before the month when its first day is not. When the refresh falls behind, the days it has not
    reached are not days without spend: the forecast projects them with the rest of the month."""
    days = MeteredDay.objects.filter(day__gte=month, day__lt=today, complete=True)
    complete = set(days.values_list("day", flat=True))
    day = month
    while day in complete:
        day += timedelta(days=1)
    return day - timedelta(days=1)


@dataclass
class TeamForecast:
    forecast: Forecast
    month: date
    metered_until: datetime  # the end of the last whole day the forecast counts as metered
    held_by_budget: bool = False  # the budget is reached: the queued jobs it holds are not forecast to run
    chart: dict = field(default_factory=dict)


def team_forecast(*, team: Team, now: datetime, budget=None) -> TeamForecast:
    """The current month's bill of `team`, forecast from the days metered so far (the month's whole UTC days before
    today, up to the first one the rollups have not completed). `budget` is the team's `BudgetStatus` (or None): its
    cap is drawn on the chart, and once it is reached the queued jobs it holds are not forecast to run."""
    month = month_of(now)
    start, end = month_bounds(month)
    days_in_month = (next_month(month) - month).days
    today = now.date()
    last_metered = metered_through(month=month, today=today)
    days_elapsed = (last_metered - month).days + 1
    first = history_start(team=team, today=today)
    costs, so_far = variable_costs(team=team, first=first, last=last_metered, month=month)
    held_by_budget = budget is not None and budget.reached
    metered_until = midnight(last_metered + timedelta(days=1))
    daily = list(costs.values())
    forecast = forecast_month(
        days_in_month=days_in_month,
        days_elapsed=days_elapsed,
        fixed=month_fixed(team=team, month=month),
        daily_variable=daily,
        variable_so_far=so_far,
        queued=queued_cost(team=team, now=now, month_end=end, budget_reached=held_by_budget),
        reservation_change=reservation_change(
            team=team, since=metered_until, until=end, window_start=max(metered_until - RECENT, midnight(first))
        ),
    )
    budget_line = budget.cap if budget is not None else None
    chart = forecast_chart(forecast, daily[len(daily) - days_elapsed :], month, budget_line=budget_line)
    return TeamForecast(
        forecast=forecast,
        month=month,
        metered_until=metered_until,
        held_by_budget=held_by_budget,
        chart=chart,
    )


# The chart: spend so far (fixed fee + variable cost accumulated day by day) and the projection's band to the month's
# end. Geometry computed here; the template only places numbers (STYLE.md, 11).
WIDTH, HEIGHT, PAD = 720, 180, 30


def forecast_chart(
    forecast: Forecast, month_days: list[Decimal], month: date, *, budget_line: Decimal | None = None
) -> dict:
    """The variable part of the month (what a lead steers; the reservation fees come on top, fixed): spent so far,
    accumulated day by day, and the forecast's expected line and 80 % band from today to the month's end, beside the
    budget's cap when there is one."""
    variable_low = forecast.variable_so_far + forecast.rest_low
    top = max([forecast.variable_high, budget_line or ZERO, Decimal(1)]) * Decimal("1.05")
    # A net lender's variable part goes below zero (credits above its costs): the chart reaches down to it.
    running = list(accumulate(month_days))
    bottom = min([ZERO, variable_low, *running]) * Decimal("1.05")
    days = forecast.days_in_month

    def x(day: int) -> Decimal:
        return round_half_up(PAD + Fraction(WIDTH - 2 * PAD) * day / days, 1)

    def y(amount: Decimal) -> Decimal:
        return round_half_up(HEIGHT - PAD - Fraction(amount - bottom) / Fraction(top - bottom) * (HEIGHT - 2 * PAD), 1)

    spent, points = ZERO, [f"{x(0)},{y(ZERO)}"]
    for index, cost in enumerate(month_days, start=1):
        spent += cost
        points.append(f"{x(index)},{y(spent)}")
    now_x, now_y = x(forecast.days_elapsed), y(forecast.variable_so_far)
    end_x = x(days)
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "pad": PAD,
        "right": WIDTH - PAD,
        "axis_y": y(ZERO),
        "label_y": HEIGHT - 10,
        "spent_points": " ".join(points),
        "band_points": f"{now_x},{now_y} {end_x},{y(variable_low)} {end_x},{y(forecast.variable_high)}",
        "expected": {"x1": now_x, "y1": now_y, "x2": end_x, "y2": y(forecast.variable_expected)},
        "top_label": format_money(top, 0),
        "top_y": PAD,
        "budget_y": y(budget_line) if budget_line is not None else None,
        "first_label": date_format(month, "MONTH_DAY_FORMAT"),
        "last_label": date_format(next_month(month) - timedelta(days=1), "MONTH_DAY_FORMAT"),
        "title": _(
            "Variable part so far %(spent)s; at the month's end %(expected)s (80 %% interval %(low)s – %(high)s); "
            "the reservation fees, %(fixed)s, come on top"
        )
        % {
            "spent": format_money(forecast.variable_so_far),
            "expected": format_money(forecast.variable_expected),
            "low": format_money(variable_low),
            "high": format_money(forecast.variable_high),
            "fixed": format_money(forecast.fixed),
        },
    }


# --- advice ---------------------------------------------------------------------------------------------------------

_LEVELS_SQL = """
WITH events AS (
    SELECT greatest(started_at, %(start)s) AS t, gpus AS delta
    FROM billing_usageinterval
    WHERE team_id = %(team)s AND pool_id = %(pool)s
      AND tstzrange(started_at, ended_at, '[)') && tstzrange(%(start)s, %(end)s, '[)')
    UNION ALL
    SELECT least(coalesce(ended_at, %(end)s), %(end)s), -gpus
    FROM billing_usageinterval
    WHERE team_id = %(team)s AND pool_id = %(pool)s
      AND tstzrange(started_at, ended_at, '[)') && tstzrange(%(start)s, %(end)s, '[)')
),
levels AS (
    SELECT t, sum(delta) OVER (ORDER BY t) AS level, lead(t) OVER (ORDER BY t) AS t_next FROM events
)
SELECT level::int, sum(extract(epoch FROM t_next - t)) FROM levels WHERE t_next > t GROUP BY level
"""


def usage_levels(*, team: Team, pool: Pool, start: datetime, end: datetime) -> dict[int, Decimal]:
    """How long `team` held each number of GPUs in `pool` within [start, end): {GPUs: seconds}. One pool's: the
    advice sizes the reservation there, and GPUs held in another pool (reserved there, or elastic) neither fill nor
    overflow it. Ties at one instant are peers of the running sum, so the zero-length segments between them add
    nothing."""
    with connection.cursor() as cursor:
        cursor.execute(_LEVELS_SQL, {"team": team.pk, "pool": pool.pk, "start": start, "end": end})
        return {level: Decimal(seconds) for level, seconds in cursor.fetchall() if level > 0}


@dataclass
class TeamAdvice:
    advice: Advice
    pool: Pool
    first_month: date
    last_month: date
    months: int


def fitted_months(*, team: Team, pool: Pool, now: datetime) -> list[date]:
    """The last whole months (FIT_MONTHS at most) since the team's first day in `pool` (its first metered day there,
    or the start of its first reservation there, whichever is earlier): the month of that day only when it is the
    month's first. A reservation begun on the 20th would weigh twelve days of use against a month's fee, and the
    months before a team came to the pool would weigh no use at all against whole fees."""
    metered = DailyUsage.objects.filter(team=team, pool=pool).order_by("day").values_list("day", flat=True).first()
    reserved = Reservation.objects.filter(team=team, pool=pool).aggregate(first=Min("starts_at"))["first"]
    starts = [day for day in (metered, _utc_day(reserved)) if day is not None]
    if not starts:
        return []
    first = min(starts)
    months, month = [], previous_month(month_of(now))
    while len(months) < FIT_MONTHS and month >= first:
        months.append(month)
        month = previous_month(month)
    return months[::-1]


def _utc_day(moment: datetime | None) -> date | None:
    return None if moment is None else moment.astimezone(UTC).date()


def team_advice(*, team: Team, now: datetime) -> TeamAdvice | None:
    """The reservation size that would have cost least over the fitted months, in the reserved pool where the team
    holds most GPUs now (its prices); None without a reservation or a whole month of history in that pool."""
    reserved: dict[int, int] = defaultdict(int)
    for reservation in Reservation.objects.filter(team=team, pool__kind=PoolKind.RESERVED).active_at(now):
        reserved[reservation.pool_id] += reservation.gpus
    if not reserved:
        return None
    pool_id = max(reserved, key=lambda pk: (reserved[pk], -pk))
    pool = Pool.objects.get(pk=pool_id)
    months = fitted_months(team=team, pool=pool, now=now)
    if not months:
        return None
    levels = usage_levels(team=team, pool=pool, start=month_bounds(months[0])[0], end=month_bounds(months[-1])[1])
    advice = advise(
        levels,
        current_gpus=reserved[pool_id],
        monthly_price=pool.monthly_price_per_gpu,
        hourly_price=pool.hourly_price_per_gpu,
        months=len(months),
    )
    return TeamAdvice(advice=advice, pool=pool, first_month=months[0], last_month=months[-1], months=len(months))


def as_data(forecast: TeamForecast | None, advice: TeamAdvice | None) -> dict:
    """The forecast and the advice for the API and exports: money as strings to the cent (unit prices to their own
    four places, as invoice lines give them), hours as strings to six places. Strings, because a Decimal in a plain
    DRF `Response` would be written as a float."""
    data: dict = {"forecast": None, "advice": None}
    if forecast is not None:
        f = forecast.forecast
        data["forecast"] = {
            "month": f"{forecast.month:%Y-%m}",
            "metered_until": f"{forecast.metered_until:%Y-%m-%dT%H:%M:%SZ}",
            "days_elapsed": f.days_elapsed,
            "days_in_month": f.days_in_month,
            "fixed": as_text(f.fixed),
            "variable_so_far": as_text(f.variable_so_far),
            "queued": as_text(f.queued),
            "expected": as_text(f.expected),
            "low": as_text(f.low),
            "high": as_text(f.high),
            "interval": "80 %",
            "basis": f.basis,
        }
    if advice is not None:
        a = advice.advice

        def size(cost) -> dict:
            return {
                "reserved_gpus": cost.reserved_gpus,
                "reservation_fee": as_text(cost.reservation_fee),
                "elastic_cost": as_text(cost.elastic_cost),
                "total": as_text(cost.total),
                "elastic_peak_gpus": cost.elastic_peak_gpus,
                "elastic_gpu_hours": as_text(cost.elastic_gpu_hours, QUANTITY_PLACES),
                "hours_above_reservation": as_text(cost.hours_above_reservation, QUANTITY_PLACES),
            }

        data["advice"] = {
            "pool": advice.pool.slug,
            "months": [f"{advice.first_month:%Y-%m}", f"{advice.last_month:%Y-%m}"],
            "advised": size(a.advised),
            "current": size(a.current),
            "saving": as_text(a.saving),
            "monthly_price_per_gpu": as_text(advice.pool.monthly_price_per_gpu),
            "hourly_price_per_gpu": as_text(advice.pool.hourly_price_per_gpu, UNIT_PRICE_PLACES),
        }
    return data


# --- the monthly e-mail to leads ------------------------------------------------------------------------------------


def advice_words(advice: TeamAdvice) -> str:
    """The advice in one paragraph of the active language (the page says the same in its own markup)."""
    a = advice.advice
    return _(
        "Over %(first)s – %(last)s, at the prices of %(pool)s, reserving %(best)s GPUs would have cost least (you "
        "reserve %(current)s): %(total)s instead of %(current_total)s, a saving of %(saving)s. The rest on elastic "
        "GPUs: up to %(peak)s GPUs, %(gpu_hours)s GPU-hours; for %(hours)s hours the team used more than that."
    ) % {
        "first": date_format(advice.first_month, "YEAR_MONTH_FORMAT"),
        "last": date_format(advice.last_month, "YEAR_MONTH_FORMAT"),
        "pool": advice.pool.name,
        "best": a.advised.reserved_gpus,
        "current": a.current.reserved_gpus,
        "total": format_money(a.advised.total),
        "current_total": format_money(a.current.total),
        "saving": format_money(a.saving),
        "peak": a.advised.elastic_peak_gpus,
        "gpu_hours": format_money(a.advised.elastic_gpu_hours, 1),
        "hours": format_money(a.advised.hours_above_reservation, 1),
    }


def email_spend_summaries(*, now: datetime, base_url: str) -> int:
    """At the start of a month: each team's leads get the reservation advice fitted on the months just ended, with
    a link to the billing page; teams without advice (no reservation or no whole month) get nothing. Returns how
    many e-mails were sent."""
    from django.urls import reverse

    from portal.mail import mail_leads

    sent = 0
    for team in Team.objects.order_by("slug"):
        advice = team_advice(team=team, now=now)
        if advice is None:
            continue
        link = f"{base_url.rstrip('/')}{reverse('billing:team_billing', args=[team.slug])}"

        def compose(team=team, advice=advice, link=link) -> tuple[str, str]:
            subject = _("Reservoir: reservation advice for %(team)s") % {"team": team.name}
            spend_line = _("The team's spend: %(link)s") % {"link": link}
            return subject, f"{advice_words(advice)}\n\n{spend_line}"

        sent += mail_leads(team, compose)
    return sent
