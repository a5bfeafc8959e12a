"""A small, obviously-correct metering, to check the SQL against.

It cuts the period at every moment anything starts or ends and, on each piece, adds up by brute force which
intervals and reservations cover it. Quadratic, and fine for a few dozen rows.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
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


@dataclass(frozen=True)
class LendingSetting:
    """One change of a hold's lending setting (the hold's index in the list of holds, from `at` on)."""

    hold: int
    at: datetime
    lending: str  # "none" | "idle" | "protect"
    protected: int


def _lendable(hold: Held, index: int, changes: list[LendingSetting], at: datetime) -> int:
    lending, protected = "idle", 0
    # the latest change at or before `at`; of changes at the same instant, the one written last
    applicable = [(change.at, position, change) for position, change in enumerate(changes) if change.hold == index]
    applicable = [item for item in applicable if item[0] <= at]
    if applicable:
        _at, _position, latest = max(applicable, key=lambda item: (item[0], item[1]))
        lending, protected = latest.lending, latest.protected
    if lending == "none":
        return 0
    if lending == "protect":
        return max(0, hold.gpus - protected)
    return hold.gpus


MICRO = Fraction(1, 1_000_000)


def _round_day(total: Decimal, exact: dict[int, Fraction]) -> dict[int, Decimal]:
    """A pool's day: the teams' exact parts (Fractions adding up to `total`) in whole GPU-microseconds, floors first,
    then one microsecond more each to the largest remainders (ties: the lower team id), adding up to `total`."""
    floors = {team: Fraction(int(part / MICRO)) * MICRO for team, part in exact.items()}  # parts ≥ 0: int() floors
    left = int((Fraction(total) - sum(floors.values())) / MICRO)
    for team in sorted(exact, key=lambda team: (-(exact[team] - floors[team]), team))[:left]:
        floors[team] += MICRO
    return {team: Decimal(part.numerator) / Decimal(part.denominator) for team, part in floors.items()}


def _contract_at(contract, at):
    """A pool's contract at `at`: the latest change at or before it (of several at one instant, the last written);
    before the first change, the first."""
    if isinstance(contract, int):
        return contract
    in_order = sorted(enumerate(contract), key=lambda item: (item[1][0], item[0]))
    before = [gpus for _index, (moment, gpus) in in_order if moment <= at]
    return before[-1] if before else in_order[0][1][1]


def meter_lending(pods, holds, changes, contracted, reserved_pools, start, end, now):
    """{(team, pool): (lent, borrowed, unreserved)} GPU-seconds over [start, end), per PRODUCT.md's rule:

    at every moment, in each reserved pool, the teams' overage beyond what the unreserved GPUs (contracted − Σ
    reservations; `contracted[pool]` is a number, or the pool's contract changes as (effective from, GPUs) in the order
    they were written) serve, up to Σ idle lendable GPUs, is borrowed (B GPUs); borrowers share B pro rata to their
    overage and lenders pro rata to their idle lendable GPUs, exactly (Fractions). Per pool and UTC day the parts are
    rounded to the GPU-microsecond by largest remainder so that they add up to Σ B × seconds. Unreserved = overage −
    borrowed.
    """
    result = {}
    for pool in reserved_pools:
        cuts = {start, end}
        day = datetime.combine(start.date(), time(), tzinfo=UTC) + timedelta(days=1)
        while day < end:
            cuts.add(day)
            day += timedelta(days=1)
        for pod in pods:
            if pod.pool == pool:
                cuts |= {pod.started_at, pod.ended_at or now}
        for index, hold in enumerate(holds):
            if hold.pool == pool:
                cuts |= {hold.starts_at, hold.ends_at}
                cuts |= {change.at for change in changes if change.hold == index}
        if not isinstance(contracted[pool], int):
            cuts |= {at for at, _gpus in contracted[pool]}
        cuts = sorted(moment for moment in cuts if start <= moment <= end)
        teams = {pod.team for pod in pods if pod.pool == pool} | {hold.team for hold in holds if hold.pool == pool}
        # per UTC day: exact parts per side and team, and Σ B × seconds
        days: dict = {}
        overage: dict[int, Decimal] = {}
        for a, b in zip(cuts, cuts[1:], strict=False):
            using = {
                team: sum(
                    p.gpus
                    for p in pods
                    if p.pool == pool and p.team == team and p.started_at <= a and b <= (p.ended_at or now)
                )
                for team in teams
            }
            active = [(i, h) for i, h in enumerate(holds) if h.pool == pool and h.starts_at <= a and b <= h.ends_at]
            holding = {team: sum(h.gpus for _i, h in active if h.team == team) for team in teams}
            lendable = {team: sum(_lendable(h, i, changes, a) for i, h in active if h.team == team) for team in teams}
            over = {team: using[team] - holding[team] for team in teams if using[team] > holding[team]}
            idle = {
                team: min(holding[team] - using[team], lendable[team])
                for team in teams
                if holding[team] > using[team] and lendable[team] > 0
            }
            unreserved_gpus = max(0, _contract_at(contracted[pool], a) - sum(holding.values()))
            borrowed = min(max(0, sum(over.values()) - unreserved_gpus), sum(idle.values()))
            duration = seconds(b - a)
            for team, gpus in over.items():
                overage[team] = overage.get(team, Decimal(0)) + gpus * duration
            if not borrowed or not duration:
                continue
            figures = days.setdefault(a.astimezone(UTC).date(), {"total": Decimal(0), "lent": {}, "borrowed": {}})
            figures["total"] += borrowed * duration
            for side, weights in (("borrowed", over), ("lent", idle)):
                whole = sum(weights.values())
                for team, weight in weights.items():
                    part = Fraction(borrowed * weight, whole) * Fraction(duration)
                    figures[side][team] = figures[side].get(team, Fraction(0)) + part
        totals = {team: [Decimal(0), Decimal(0)] for team in teams}
        for figures in days.values():
            for column, side in ((0, "lent"), (1, "borrowed")):
                for team, part in _round_day(figures["total"], figures[side]).items():
                    totals[team][column] += part
        for team in teams:
            lent, got = totals[team]
            figures = (lent, got, overage.get(team, Decimal(0)) - got)
            if any(figures):
                result[(team, pool)] = figures
    return result
