"""Billing periods: UTC calendar months and days, and the exact arithmetic on their lengths.

A month is named by the date of its first day (`date(2026, 11, 1)`). Every period is half-open, [start, end), and
every boundary is a UTC midnight. Lengths are exact `Decimal` seconds: PostgreSQL and Python both keep timestamps
to the microsecond, so a duration in seconds always has at most six decimal places.
"""

import re
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

MONTH_PATTERN = re.compile(r"(?P<year>\d{4})-(?P<month>0[1-9]|1[0-2])")  # whole value: fullmatch, never `$`
# The months that can be named: no usage predates 1970, and the month after the last one must still be a date
# (Python's dates end in 9999), so every period arithmetic below stays valid.
FIRST_MONTH = date(1970, 1, 1)
LAST_MONTH = date(9998, 12, 1)
SECONDS_PER_HOUR = Decimal(3600)
SECONDS_PER_MINUTE = Decimal(60)


def month_of(moment: datetime | date) -> date:
    """The month (its first day) that contains `moment`, taken in UTC."""
    if isinstance(moment, datetime):
        moment = moment.astimezone(UTC).date()
    return moment.replace(day=1)


def next_month(month: date) -> date:
    return date(month.year + (month.month == 12), month.month % 12 + 1, 1)


def previous_month(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def midnight(day: date) -> datetime:
    """The UTC midnight that starts `day`."""
    return datetime.combine(day, time.min, tzinfo=UTC)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[start, end) of `month` as UTC datetimes."""
    return midnight(month), midnight(next_month(month))


def days_of(first: date, last: date) -> list[date]:
    """Every day from `first` to `last`, both included."""
    return [first + timedelta(days=offset) for offset in range((last - first).days + 1)]


def seconds(duration: timedelta) -> Decimal:
    """`duration` as exact Decimal seconds (microsecond resolution, never a float)."""
    whole = duration.days * 86400 + duration.seconds
    return Decimal(whole) + Decimal(duration.microseconds).scaleb(-6)


def overlap_seconds(start: datetime, end: datetime, window_start: datetime, window_end: datetime) -> Decimal:
    """Exact seconds of [start, end) that fall inside [window_start, window_end)."""
    lo, hi = max(start, window_start), min(end, window_end)
    return seconds(hi - lo) if hi > lo else Decimal(0)


def parse_month(value: str | None) -> date | None:
    """'2026-11' → date(2026, 11, 1); anything else, or a month outside [FIRST_MONTH, LAST_MONTH], → None."""
    match = MONTH_PATTERN.fullmatch(value or "")
    if not match:
        return None
    year = int(match["year"])
    if not FIRST_MONTH.year <= year <= LAST_MONTH.year:
        return None
    return date(year, int(match["month"]), 1)


def format_month(month: date) -> str:
    return f"{month:%Y-%m}"
