"""The most GPUs held at one moment by a set of half-open periods: the sweep behind the contract invariant
(`pools.services`: a pool's reservations never add up to more than its contract at any moment)."""

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class Period:
    starts_at: datetime
    ends_at: datetime
    gpus: int


def peak_gpus(periods: list[Period], *, within_start: datetime, within_end: datetime) -> int:
    """The largest sum of `gpus` held at one moment by `periods`, looking only inside [within_start, within_end).

    Periods are half-open: one that ends at the moment another starts does not overlap it.
    """
    events: list[tuple[datetime, int]] = []
    for period in periods:
        start = max(period.starts_at, within_start)
        end = min(period.ends_at, within_end)
        if start < end:
            events.append((start, period.gpus))
            events.append((end, -period.gpus))
    # At equal times, releases (-) sort before acquisitions (+), which is what half-open intervals mean.
    events.sort(key=lambda event: (event[0], event[1]))
    peak = held = 0
    for _moment, delta in events:
        held += delta
        peak = max(peak, held)
    return peak


def peak_from_now(reservations, *, now: datetime) -> int:
    """The most GPUs `reservations` (a queryset) hold at one moment from `now` on."""
    rows = reservations.filter(ends_at__gt=now).values_list("starts_at", "ends_at", "gpus")
    return peak_gpus([Period(*row) for row in rows], within_start=now, within_end=datetime.max.replace(tzinfo=UTC))
