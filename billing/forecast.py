"""The month-end forecast of a team's bill, with an 80 % interval: pure arithmetic, no database.

A month's bill is a fixed part (the reservation fees, known in advance) and a variable part (overage and spill at
the pools' hourly prices, less lending credits). On day `d` of a month of `D` days the variable part is known up to
the end of day `d`; the rest, `n = D − d` days, is projected from the recent rate:

    rate   = mean daily variable cost of the last RECENT_DAYS days (across the month boundary when needed)
    rest   = n × rate × ratio

where `ratio` is read off the team's own history: for every past day t with RECENT_DAYS days before it and n days
after it, (what the next n days really cost) ÷ (n × the mean of the RECENT_DAYS before t). The median of those
ratios is the expected factor, their 10th and 90th percentiles bound the 80 % interval. The team's history so
calibrates both the bias of a plain rate (a growing team's ratios sit above 1) and its spread (a bursty team's are
wide). When the recent rate is zero (or negative: lending credits above the variable cost) a ratio means nothing;
then the same percentiles are taken of the absolute n-day costs that followed such windows (a net lender's credits
among them: they already are the rest, so n × rate is not added to them again).
With fewer than MIN_SAMPLES such windows the interval falls back to a normal approximation: n × rate ± z₉₀ × σ ×
√n, σ the standard deviation of the recent days.

Reservations that start or end within the rest move the team's use between overage and the reservation: the caller
gives what they change in the cost of the team's recent use (`reservation_change`: negative for the overage a new
reservation will cover, positive for the overage an ending one will create). It is added to the projection before
the ratios scale it (`(n × rate + change) × ratio`), or to the rest itself after a quiet spell.

Work already queued is a floor on the rest: the jobs waiting now will run (and cost what they cost above the
reservation) whatever the usual rate says, so each of the three figures of the rest is at least their cost, plus the
credits the recent rate says are still to come when it is negative (a lender's credits do not stop for the queue).
Everything is `Decimal`; the results are rounded to the cent (half up) once, at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from .money import to_cents

RECENT_DAYS = 14
MIN_SAMPLES = 8
LOW_QUANTILE, HIGH_QUANTILE = Decimal("0.1"), Decimal("0.9")
Z_90 = Decimal("1.2816")  # the standard normal's 90th percentile: an 80 % two-sided interval
ZERO = Decimal(0)


@dataclass(frozen=True)
class Forecast:
    """The month's bill: expected, with an 80 % interval [low, high]; and its parts."""

    fixed: Decimal
    variable_so_far: Decimal
    rest_expected: Decimal
    rest_low: Decimal
    rest_high: Decimal
    queued: Decimal
    days_elapsed: int
    days_in_month: int
    basis: str  # "ratios" | "after_quiet" | "normal" | "month_over": which rule made the interval
    samples: int

    @property
    def expected(self) -> Decimal:
        return self.fixed + self.variable_so_far + self.rest_expected

    @property
    def low(self) -> Decimal:
        return self.fixed + self.variable_so_far + self.rest_low

    @property
    def high(self) -> Decimal:
        return self.fixed + self.variable_so_far + self.rest_high

    @property
    def variable_expected(self) -> Decimal:
        return self.variable_so_far + self.rest_expected

    @property
    def variable_high(self) -> Decimal:
        return self.variable_so_far + self.rest_high


def quantile(values: list[Decimal], fraction: Decimal) -> Decimal:
    """The `fraction` quantile of `values` by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of nothing")
    position = fraction * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _mean(values: list[Decimal]) -> Decimal:
    return sum(values, ZERO) / len(values) if values else ZERO


def _windows(history: list[Decimal], remaining: int, *, quiet: bool) -> list[Decimal]:
    """For each past day with RECENT_DAYS before it and `remaining` after it: the ratio of what followed to the rate
    before (`quiet` False, windows whose rate was positive), or what followed itself (`quiet` True, windows whose
    rate was not)."""
    found = []
    prefix = [ZERO]
    for value in history:
        prefix.append(prefix[-1] + value)
    for start in range(RECENT_DAYS, len(history) - remaining + 1):
        rate = (prefix[start] - prefix[start - RECENT_DAYS]) / RECENT_DAYS
        following = prefix[start + remaining] - prefix[start]
        if quiet and rate <= 0:
            found.append(following)
        elif not quiet and rate > 0:
            found.append(following / (remaining * rate))
    return found


def forecast_month(
    *,
    days_in_month: int,
    days_elapsed: int,
    fixed: Decimal,
    daily_variable: list[Decimal],
    queued: Decimal = ZERO,
    variable_so_far: Decimal | None = None,
    reservation_change: Decimal = ZERO,
) -> Forecast:
    """Forecast the month's bill after `days_elapsed` whole days of a `days_in_month`-day month.

    `daily_variable` is the team's variable cost per day, oldest first, its last `days_elapsed` entries being the
    days of this month so far (earlier entries: the months before, the longer the better calibrated); `fixed` the
    month's reservation fees in full; `queued` what the work waiting now will cost above the reservation;
    `variable_so_far` the month's variable part so far as its invoice counts it, when known (else the sum of its
    days); `reservation_change` what the reservations starting or ending in the rest change in the cost of the
    recent use."""
    if not 0 <= days_elapsed <= days_in_month:
        raise ValueError("days_elapsed must lie within the month")
    if days_elapsed > len(daily_variable):
        raise ValueError("daily_variable must hold every elapsed day of the month")
    so_far = variable_so_far
    if so_far is None:
        so_far = sum(daily_variable[len(daily_variable) - days_elapsed :], ZERO)
    remaining = days_in_month - days_elapsed
    queued = max(queued, ZERO)
    if remaining == 0:
        return Forecast(
            fixed=to_cents(fixed),
            variable_so_far=to_cents(so_far),
            rest_expected=ZERO,
            rest_low=ZERO,
            rest_high=ZERO,
            queued=to_cents(queued),
            days_elapsed=days_elapsed,
            days_in_month=days_in_month,
            basis="month_over",
            samples=0,
        )
    recent = daily_variable[-RECENT_DAYS:]
    rate = _mean(recent)
    base = remaining * rate + reservation_change
    samples = _windows(daily_variable, remaining, quiet=rate <= 0)
    if len(samples) >= MIN_SAMPLES and rate > 0:
        basis = "ratios"
        expected, low, high = (base * quantile(samples, q) for q in (Decimal("0.5"), LOW_QUANTILE, HIGH_QUANTILE))
    elif len(samples) >= MIN_SAMPLES:
        basis = "after_quiet"
        expected, low, high = (
            quantile(samples, q) + reservation_change for q in (Decimal("0.5"), LOW_QUANTILE, HIGH_QUANTILE)
        )
    else:
        basis = "normal"
        deviation = (
            (sum(((value - rate) ** 2 for value in recent), ZERO) / (len(recent) - 1)).sqrt()
            if len(recent) > 1
            else abs(rate)
        )
        half_width = Z_90 * deviation * Decimal(remaining).sqrt()
        expected, low, high = base, base - half_width, base + half_width
    # What is queued now will run: a floor under each figure of the rest (beside the credits still to come).
    floor = queued + min(base, ZERO)
    expected, low, high = (max(value, floor) for value in (expected, low, high))
    return Forecast(
        fixed=to_cents(fixed),
        variable_so_far=to_cents(so_far),
        rest_expected=to_cents(expected),
        rest_low=to_cents(min(low, expected)),
        rest_high=to_cents(max(high, expected)),
        queued=to_cents(queued),
        days_elapsed=days_elapsed,
        days_in_month=days_in_month,
        basis=basis,
        samples=len(samples),
    )
