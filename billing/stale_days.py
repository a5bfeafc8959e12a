"""Which UTC days a change to the metered data makes stale: the rule behind `billing.services.refresh_usage`.

A day's rollups (`DailyUsage`) are a function of the usage intervals, the reservations and the reservations'
lending changes that cover it. So the service that writes one of those rows marks, in the same transaction, the
days the row covered before the write and covers after it (`billing.services.mark_days_stale`); the next refresh
meters exactly those days again. These functions say which days, and write nothing:

- an interval covers [started_at, its end], its end being `ended_at`, or `now` while it is open (never before its
  start: an open interval that starts later covers its first day only). A new interval marks what it covers, a
  deleted one what it covered; an interval whose end alone moved (closed, or corrected) marks just the days
  between its old and its new end — the days before were covered either way and stay valid; any other change to
  its team, pool, GPUs or start marks what it covered and what it covers. A change to anything else (its job, node
  or pod name) changes no figure and marks nothing.
- a reservation covers [starts_at, ends_at]; a new, changed or deleted one marks what it covered and covers.
- a lending change marks from its moment to its reservation's end, but not past `now` (unless it takes effect
  later: then its own day).

`now` is the writing transaction's time (PostgreSQL's `now()`), the same for every write of one transaction.
Days are UTC calendar days, both ends included. Until migration 0008 database triggers marked these same days.
"""

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple

DayRange = tuple[date, date]


class IntervalTerms(NamedTuple):
    """What metering reads of a usage interval."""

    team_id: int | None
    pool_id: int
    gpus: int
    started_at: datetime
    ended_at: datetime | None


TERMS = IntervalTerms._fields


def days_between(first: datetime | None, last: datetime | None) -> list[DayRange]:
    """The UTC days from `first` to `last`, both included, as one range; none if either is missing or `last` is
    before `first`."""
    if first is None or last is None or last < first:
        return []
    return [(first.astimezone(UTC).date(), last.astimezone(UTC).date())]


def _end(interval: IntervalTerms, now: datetime) -> datetime:
    return interval.ended_at if interval.ended_at is not None else max(now, interval.started_at)


def _covered(interval: IntervalTerms, now: datetime) -> list[DayRange]:
    return days_between(interval.started_at, _end(interval, now))


def interval_change(before: IntervalTerms | None, after: IntervalTerms | None, *, now: datetime) -> list[DayRange]:
    """The days a write of one usage interval makes stale: `before` None for an insert, `after` None for a delete."""
    if before is None or after is None:
        return [*(_covered(before, now) if before else []), *(_covered(after, now) if after else [])]
    if before[:4] == after[:4]:  # same team, pool, GPUs and start
        if before.ended_at == after.ended_at:
            return []
        old_end, new_end = _end(before, now), _end(after, now)
        return days_between(min(old_end, new_end), max(old_end, new_end))
    return [*_covered(before, now), *_covered(after, now)]


def reservation_change(
    before: tuple[datetime, datetime] | None, after: tuple[datetime, datetime] | None
) -> list[DayRange]:
    """The days a write of one reservation makes stale, each side given as (starts_at, ends_at): `before` None for
    a new reservation, `after` None for a deleted one. Any change marks both, whatever field it changed."""
    return [*(days_between(*before) if before else []), *(days_between(*after) if after else [])]


def lending_change(*, effective_from: datetime, reservation_ends_at: datetime, now: datetime) -> list[DayRange]:
    """The days a lending change (made, changed or deleted) of a reservation ending at `reservation_ends_at` makes
    stale: from its moment to the reservation's end, at most up to `now`, or its own day if it is later."""
    return days_between(effective_from, min(reservation_ends_at, max(now, effective_from)))


def expand(ranges: Iterable[DayRange]) -> list[date]:
    """Every day of `ranges`, once each, in order (overlapping ranges are merged first, so a thousand open intervals
    of the same weeks cost a few weeks of days)."""
    days: list[date] = []
    reached: date | None = None  # the last day listed so far
    for first, last in sorted(ranges):
        day = first if reached is None or first > reached else reached + timedelta(days=1)
        while day <= last:
            days.append(day)
            day += timedelta(days=1)
        reached = last if reached is None else max(reached, last)
    return days
