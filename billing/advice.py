"""Reservation advice: the reservation size that would have cost least over the last months, at the pool's prices.

The team's use over the fitted months is a step function of time; all that matters for the money is how long it
spent at each level (`levels`: GPUs in use → seconds). With a reservation of r GPUs the team pays

    cost(r) = r × monthly price × months  +  Σ_L max(0, L − r) × hours at L × hourly price

(GPUs above the reservation run as overage or spill, elastic GPUs at the hourly price; lending credits are left
out: they reward idle GPUs the advice tries not to buy). cost is convex in r: one more reserved GPU saves the
hourly price for every hour the team used more than r GPUs, and costs a month's fee. So the cheapest size is the
smallest r at which hours(L > r) × hourly price ≤ monthly price × months: the newsvendor's quantile, read off the
levels sorted from the top. Ties go to the smaller reservation (less commitment for the same money). The rest of
the demand is the mix's elastic part: its peak (the highest level minus r) and its GPU-hours. The risk is the time
the team would have used more than r GPUs: hours its jobs would have queued (strict placement) or spilled (soft).

All sums are exact (`Fraction`); money is rounded to the cent once, when shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from .money import QUANTITY_PLACES, round_half_up, to_cents

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class SizeCost:
    """What a reservation of `reserved_gpus` would have cost over the fitted months, and its risk."""

    reserved_gpus: int
    reservation_fee: Decimal
    elastic_cost: Decimal
    total: Decimal
    elastic_peak_gpus: int
    elastic_gpu_hours: Decimal
    hours_above_reservation: Decimal  # hours the team would have queued or spilled


@dataclass(frozen=True)
class Advice:
    advised: SizeCost
    current: SizeCost
    months: Decimal

    @property
    def saving(self) -> Decimal:
        """What the advised size would have saved against the current contract (negative: it would have cost more)."""
        return self.current.total - self.advised.total


def exact_cost(levels: dict[int, Fraction | Decimal | int], reserved_gpus: int, *, monthly_price, hourly_price, months):
    """cost(r) as an exact Fraction."""
    fee = reserved_gpus * Fraction(monthly_price) * Fraction(months)
    above = sum((max(0, level - reserved_gpus) * Fraction(span) for level, span in levels.items()), Fraction(0))
    return fee + above / SECONDS_PER_HOUR * Fraction(hourly_price)


def size_cost(levels: dict, reserved_gpus: int, *, monthly_price, hourly_price, months) -> SizeCost:
    fee = reserved_gpus * Fraction(monthly_price) * Fraction(months)
    gpu_seconds_above = sum((max(0, level - reserved_gpus) * Fraction(span) for level, span in levels.items()), 0)
    seconds_above = sum((Fraction(span) for level, span in levels.items() if level > reserved_gpus), Fraction(0))
    elastic = Fraction(gpu_seconds_above) / SECONDS_PER_HOUR * Fraction(hourly_price)
    peak = max((level for level, span in levels.items() if span > 0), default=0)
    return SizeCost(
        reserved_gpus=reserved_gpus,
        reservation_fee=to_cents(fee),
        elastic_cost=to_cents(elastic),
        total=to_cents(fee + elastic),
        elastic_peak_gpus=max(0, peak - reserved_gpus),
        elastic_gpu_hours=round_half_up(Fraction(gpu_seconds_above) / SECONDS_PER_HOUR, QUANTITY_PLACES),
        hours_above_reservation=round_half_up(seconds_above / SECONDS_PER_HOUR, QUANTITY_PLACES),
    )


def cheapest_size(levels: dict, *, monthly_price, hourly_price, months) -> int:
    """The smallest r minimising cost(r): walk up from 0 while one more reserved GPU saves more than it costs."""
    month_fee = Fraction(monthly_price) * Fraction(months)
    seconds_at = {level: Fraction(span) for level, span in levels.items() if level > 0 and span > 0}
    top = max(seconds_at, default=0)
    reserved = 0
    seconds_above = sum(seconds_at.values(), Fraction(0))  # time with more than `reserved` GPUs in use
    while reserved < top and seconds_above / SECONDS_PER_HOUR * Fraction(hourly_price) > month_fee:
        reserved += 1
        seconds_above -= seconds_at.get(reserved, 0)
    return reserved


def advise(levels: dict, *, current_gpus: int, monthly_price, hourly_price, months) -> Advice:
    """The cheapest reservation for `levels` (GPUs in use → seconds over `months` months), beside the current one."""
    prices = {"monthly_price": monthly_price, "hourly_price": hourly_price, "months": months}
    best = cheapest_size(levels, **prices)
    return Advice(
        advised=size_cost(levels, best, **prices),
        current=size_cost(levels, current_gpus, **prices),
        months=Decimal(months),
    )
