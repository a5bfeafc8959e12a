"""Metering in PostgreSQL: GPU-seconds R, U, O and S of each team and pool over a period, exactly.

The idea: for one team and one pool, usage is a step function of time — the sum of `gpus` of the team's
intervals covering t — and so is the reserved level. Each interval (clipped to the period, open ones ending at
`now`) becomes two events, +gpus at its start and −gpus at its end; each reservation the same on the reserved
level. A running SUM over the events ordered by time gives both levels on every segment between consecutive
change points, and LEAD gives the segment's end. Integrating over the segments:

    R = Σ reserved × duration          U = Σ min(used, reserved) × duration   (reserved pools)
    O = Σ max(0, used − reserved) × duration (reserved pools)                 S = Σ used × duration (other pools)

Several events at the same instant leave zero-length segments between them, which contribute nothing, so no
ordering among ties is needed. Durations are `extract(epoch FROM interval)`, an exact numeric with microseconds,
so the results are exact Decimal GPU-seconds. For daily rollups, a zero-change event at every UTC midnight inside
the period splits the segments at day boundaries and the result is grouped by day; because an integral is
additive over disjoint periods, the days of a month add up exactly to the month metered in one go.

Intervals without a team (pods the sync could not attribute) are not billed to anyone and are left out.
"""

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.db import connection, transaction

# Sorting a month of events for the window functions wants memory rather than temporary files.
METERING_WORK_MEM = "256MB"

_METERING_SQL = """
WITH used AS (
    SELECT i.team_id, i.pool_id, i.gpus,
           greatest(i.started_at, %(start)s) AS s,
           least(coalesce(i.ended_at, %(now)s), %(end)s) AS e
    FROM billing_usageinterval i
    WHERE i.team_id IS NOT NULL
      AND tstzrange(i.started_at, i.ended_at, '[)') && tstzrange(%(start)s, %(end)s, '[)')
      {interval_filter}
),
reserved AS (
    SELECT r.team_id, r.pool_id, r.gpus, greatest(r.starts_at, %(start)s) AS s, least(r.ends_at, %(end)s) AS e
    FROM pools_reservation r
    WHERE r.starts_at < %(end)s AND r.ends_at > %(start)s
      {reservation_filter}
),
events AS (
    SELECT team_id, pool_id, s AS t, gpus AS used_delta, 0 AS reserved_delta FROM used WHERE s < e
    UNION ALL SELECT team_id, pool_id, e, -gpus, 0 FROM used WHERE s < e
    UNION ALL SELECT team_id, pool_id, s, 0, gpus FROM reserved
    UNION ALL SELECT team_id, pool_id, e, 0, -gpus FROM reserved
    {day_boundaries}
),
levels AS (
    SELECT team_id, pool_id, t,
           sum(used_delta) OVER w AS used_gpus,
           sum(reserved_delta) OVER w AS reserved_gpus,
           lead(t) OVER w AS t_next
    FROM events
    WINDOW w AS (PARTITION BY team_id, pool_id ORDER BY t ROWS UNBOUNDED PRECEDING)
),
segments AS (
    SELECT team_id, pool_id, t, used_gpus, reserved_gpus, extract(epoch FROM t_next - t) AS seconds
    FROM levels
    WHERE t_next > t
)
SELECT sg.team_id, sg.pool_id, {bucket} AS bucket,
       coalesce(sum(sg.reserved_gpus * sg.seconds), 0) AS reserved,
       coalesce(sum(least(sg.used_gpus, sg.reserved_gpus) * sg.seconds) FILTER (WHERE p.kind = 'reserved'), 0)
           AS in_reservation,
       coalesce(sum(greatest(sg.used_gpus - sg.reserved_gpus, 0) * sg.seconds) FILTER (WHERE p.kind = 'reserved'), 0)
           AS overage,
       coalesce(sum(sg.used_gpus * sg.seconds) FILTER (WHERE p.kind <> 'reserved'), 0) AS spill
FROM segments sg
JOIN pools_pool p ON p.id = sg.pool_id
GROUP BY sg.team_id, sg.pool_id, bucket
"""

_DAY_BOUNDARIES = """
    UNION ALL
    SELECT keys.team_id, keys.pool_id, boundary, 0, 0
    FROM (SELECT team_id, pool_id FROM used UNION SELECT team_id, pool_id FROM reserved) keys
    CROSS JOIN generate_series(%(start)s + interval '1 day', %(end)s - interval '1 microsecond', interval '1 day')
        AS boundary
"""


@dataclass(frozen=True)
class Metered:
    """GPU-seconds of one team in one pool over one period (or one day of it)."""

    team_id: int
    pool_id: int
    day: date | None
    reserved: Decimal
    in_reservation: Decimal
    overage: Decimal
    spill: Decimal


def metering_sql(*, by_day: bool, team_ids: list[int] | None = None) -> str:
    """The metering query; parameters `start`, `end`, `now` (and `team_ids` when given).

    `start` and `end` must be UTC midnights when `by_day` is set; `end` must not be after `now`.
    """
    return _METERING_SQL.format(
        interval_filter="AND i.team_id = ANY(%(team_ids)s)" if team_ids is not None else "",
        reservation_filter="AND r.team_id = ANY(%(team_ids)s)" if team_ids is not None else "",
        day_boundaries=_DAY_BOUNDARIES if by_day else "",
        bucket="(sg.t AT TIME ZONE 'UTC')::date" if by_day else "NULL::date",
    )


def check_period(start: datetime, end: datetime, now: datetime) -> None:
    if end > now:
        raise ValueError(f"cannot meter up to {end:%Y-%m-%d %H:%M}: it is after now ({now:%Y-%m-%d %H:%M})")
    if start.utcoffset() is None or end.utcoffset() is None or now.utcoffset() is None:
        raise ValueError("metering needs timezone-aware datetimes")


def meter(
    *, start: datetime, end: datetime, now: datetime, by_day: bool = False, team_ids: list[int] | None = None
) -> list[Metered]:
    """R, U, O and S in exact GPU-seconds per team and pool over [start, end), straight from the intervals.

    Open intervals count up to `now`; `end` must not be after `now`. With `by_day`, one row per UTC day.
    """
    check_period(start, end, now)
    if end <= start or team_ids == []:
        return []
    params = {"start": start, "end": end, "now": now, "team_ids": team_ids}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL work_mem = %s", [METERING_WORK_MEM])
        cursor.execute(metering_sql(by_day=by_day, team_ids=team_ids), params)
        return [Metered(*row) for row in cursor.fetchall()]
