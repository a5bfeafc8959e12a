"""A small, obviously-correct metering, to check the SQL against.

It cuts the period at every moment anything starts or ends and, on each piece, adds up by brute force which
intervals and reservations cover it. Quadratic, and fine for a few dozen rows.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from billing.periods import seconds


@dataclass(frozen=True)
class Pod:
    team: int
    pool: int
    gpus: int
    started_at: datetime
    ended_at: datetime | None


@dataclass(frozen=True)
class Held:
    team: int
    pool: int
    gpus: int
    starts_at: datetime
    ends_at: datetime
    monthly_price: Decimal


def meter(pods, holds, reserved_pools, start, end, now) -> dict[tuple[int, int], tuple[Decimal, ...]]:
    """{(team, pool): (R, U, O, S)} in GPU-seconds over [start, end), open pods running until `now`."""
    pieces = {}
    for pod in pods:
        lo, hi = max(pod.started_at, start), min(pod.ended_at or now, end)
        if lo < hi:
            pieces.setdefault((pod.team, pod.pool), ([], []))[0].append((pod.gpus, lo, hi))
    for hold in holds:
        lo, hi = max(hold.starts_at, start), min(hold.ends_at, end)
        if lo < hi:
            pieces.setdefault((hold.team, hold.pool), ([], []))[1].append((hold.gpus, lo, hi))
    result = {}
    for (team, pool), (used, reserved) in pieces.items():
        cuts = sorted({moment for _gpus, lo, hi in used + reserved for moment in (lo, hi)})
        totals = [Decimal(0)] * 4
        for a, b in zip(cuts, cuts[1:], strict=False):
            using = sum(gpus for gpus, lo, hi in used if lo <= a and b <= hi)
            holding = sum(gpus for gpus, lo, hi in reserved if lo <= a and b <= hi)
            duration = seconds(b - a)
            totals[0] += holding * duration
            if pool in reserved_pools:
                totals[1] += min(using, holding) * duration
                totals[2] += max(0, using - holding) * duration
            else:
                totals[3] += using * duration
        if any(totals):
            result[(team, pool)] = tuple(totals)
    return result


def fee(hold: Held, month_start: datetime, month_end: datetime, until: datetime) -> Fraction:
    """Monthly price × GPUs × active minutes / minutes in the month, exact (not yet rounded)."""
    active = min(hold.ends_at, until, month_end) - max(hold.starts_at, month_start)
    active_minutes = Fraction(seconds(active)) / 60 if active.total_seconds() > 0 else Fraction(0)
    month_minutes = Fraction(seconds(month_end - month_start)) / 60
    return Fraction(hold.monthly_price) * hold.gpus * active_minutes / month_minutes


def cents_half_up(value: Fraction) -> Decimal:
    """Round to the cent, halves up, the slow and obvious way."""
    cents = value * 100
    whole = cents.numerator // cents.denominator
    if cents - whole >= Fraction(1, 2):
        whole += 1
    return Decimal(whole) / 100
