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

Lending extends the same steps. Each reservation's lendable GPUs (its lending setting in force, from
`pools_lendingchange`) is a third level of the team's step function, so lending changes are change points too.
At each change point a team has an overage max(0, used − reserved) and idle lendable GPUs min(max(0, reserved −
used), lendable); the changes of those (LAG) summed per pool give, on every pool segment, the pool's Σ overage,
Σ idle lendable and Σ reserved. On a pool segment the overage the unreserved GPUs (contracted − Σ reserved) do
not cover, up to Σ idle lendable, is borrowed: B whole GPUs, apportioned in whole GPUs by largest remainder to
borrowers by overage and to lenders by idle lendable (ties: lower team id). Whole GPUs × exact seconds keep every
figure an exact Decimal and make Σ lent = Σ borrowed hold per pool and segment, hence per day and month. Only pool
segments where something is borrowed are joined with the teams' segments.
"""

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.db import connection, transaction

from pools.choices import Lending, lendable_gpus_sql

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
),
reserved AS (
    SELECT r.id AS reservation_id, r.team_id, r.pool_id, r.gpus,
           greatest(r.starts_at, %(start)s) AS s, least(r.ends_at, %(end)s) AS e
    FROM pools_reservation r
    WHERE r.starts_at < %(end)s AND r.ends_at > %(start)s
),
-- Each reservation's lending setting over time: the default until its first change, then each change until the
-- next (of changes at the same instant the last one written wins, as in pools.services.lending_at).
lending_periods AS (
    SELECT c.reservation_id, c.effective_from AS p_from,
           lead(c.effective_from, 1, 'infinity'::timestamptz)
               OVER (PARTITION BY c.reservation_id ORDER BY c.effective_from, c.id) AS p_to,
           c.lending, c.protected_gpus
    FROM pools_lendingchange c
    WHERE c.reservation_id IN (SELECT reservation_id FROM reserved)
    UNION ALL
    SELECT r.reservation_id, '-infinity'::timestamptz, coalesce(min(c.effective_from), 'infinity'::timestamptz),
           '{default_lending}', 0
    FROM reserved r LEFT JOIN pools_lendingchange c ON c.reservation_id = r.reservation_id
    GROUP BY r.reservation_id
),
lendable AS (
    SELECT r.team_id, r.pool_id, {lendable_gpus} AS gpus,
           greatest(r.s, lp.p_from) AS s, least(r.e, lp.p_to) AS e
    FROM reserved r JOIN lending_periods lp ON lp.reservation_id = r.reservation_id
    WHERE greatest(r.s, lp.p_from) < least(r.e, lp.p_to)
),
events AS (
    SELECT team_id, pool_id, s AS t, gpus AS used_delta, 0 AS reserved_delta, 0 AS lendable_delta
    FROM used WHERE s < e
    UNION ALL SELECT team_id, pool_id, e, -gpus, 0, 0 FROM used WHERE s < e
    UNION ALL SELECT team_id, pool_id, s, 0, gpus, 0 FROM reserved
    UNION ALL SELECT team_id, pool_id, e, 0, -gpus, 0 FROM reserved
    UNION ALL SELECT team_id, pool_id, s, 0, 0, gpus FROM lendable
    UNION ALL SELECT team_id, pool_id, e, 0, 0, -gpus FROM lendable
    {day_boundaries}
),
changes AS (
    SELECT team_id, pool_id, t, sum(used_delta)::int AS used_delta, sum(reserved_delta)::int AS reserved_delta,
           sum(lendable_delta)::int AS lendable_delta
    FROM events
    GROUP BY team_id, pool_id, t
),
levels AS (
    SELECT c.team_id, c.pool_id, c.t, p.kind = 'reserved' AS in_reserved_pool, p.contracted_gpus,
           (sum(c.used_delta) OVER w)::int AS used_gpus,
           (sum(c.reserved_delta) OVER w)::int AS reserved_gpus,
           (sum(c.lendable_delta) OVER w)::int AS lendable_gpus,
           lead(c.t) OVER w AS t_next
    FROM changes c
    JOIN pools_pool p ON p.id = c.pool_id
    WINDOW w AS (PARTITION BY c.team_id, c.pool_id ORDER BY c.t)
),
segments AS (
    SELECT team_id, pool_id, t, in_reserved_pool, used_gpus, reserved_gpus,
           extract(epoch FROM t_next - t) AS seconds
    FROM levels
    WHERE t_next > t
),
metered AS (
    SELECT team_id, pool_id, {bucket} AS bucket,
           coalesce(sum(reserved_gpus * seconds), 0) AS reserved,
           coalesce(sum(least(used_gpus, reserved_gpus) * seconds) FILTER (WHERE in_reserved_pool), 0)
               AS in_reservation,
           coalesce(sum(greatest(used_gpus - reserved_gpus, 0) * seconds) FILTER (WHERE in_reserved_pool), 0)
               AS overage,
           coalesce(sum(used_gpus * seconds) FILTER (WHERE NOT in_reserved_pool), 0) AS spill
    FROM segments
    GROUP BY team_id, pool_id, bucket
),
-- Lending, reserved pools only. A team's overage (GPUs above its reservation) and its idle lendable GPUs
-- (min(reserved − used, lendable)) at each of its change points; their changes summed per pool give the pool's
-- levels at every instant anything in the pool changes.
team_lending AS (
    SELECT team_id, pool_id, t, t_next, reserved_gpus, contracted_gpus,
           greatest(used_gpus - reserved_gpus, 0) AS over_gpus,
           least(greatest(reserved_gpus - used_gpus, 0), lendable_gpus) AS lend_gpus
    FROM levels
    WHERE in_reserved_pool
),
team_changes AS (
    SELECT pool_id, t, contracted_gpus,
           over_gpus - lag(over_gpus, 1, 0) OVER wt AS over_delta,
           lend_gpus - lag(lend_gpus, 1, 0) OVER wt AS lend_delta,
           reserved_gpus - lag(reserved_gpus, 1, 0) OVER wt AS reserved_delta
    FROM team_lending
    WINDOW wt AS (PARTITION BY team_id, pool_id ORDER BY t)
),
pool_levels AS (
    SELECT pool_id, t, contracted_gpus,
           (sum(sum(over_delta)::int) OVER wp)::int AS over_gpus,
           (sum(sum(lend_delta)::int) OVER wp)::int AS lend_gpus,
           (sum(sum(reserved_delta)::int) OVER wp)::int AS reserved_gpus,
           lead(t) OVER wp AS t_next
    FROM team_changes
    GROUP BY pool_id, t, contracted_gpus
    WINDOW wp AS (PARTITION BY pool_id ORDER BY t)
),
-- Per pool segment: the overage the unreserved GPUs (contracted − Σ reservations) do not cover, up to what the
-- lenders lend idle, is borrowed from lenders.
borrowing AS (
    SELECT pool_id, t, t_next, over_gpus, lend_gpus,
           least(greatest(over_gpus - greatest(coalesce(contracted_gpus, 0) - reserved_gpus, 0), 0), lend_gpus)
               AS borrowed_gpus
    FROM pool_levels
    WHERE t_next > t
),
-- Whole GPUs apportioned by largest remainder: borrowers by their overage, lenders by their idle lendable GPUs;
-- each gets floor(B × weight / total), the GPUs left go one each to the largest remainders (ties: lower team id).
shares AS (
    SELECT tl.team_id, b.pool_id, b.t, extract(epoch FROM b.t_next - b.t) AS seconds, b.borrowed_gpus,
           tl.over_gpus > 0 AS is_borrower,
           CASE WHEN tl.over_gpus > 0 THEN tl.over_gpus ELSE tl.lend_gpus END AS weight,
           CASE WHEN tl.over_gpus > 0 THEN b.over_gpus ELSE b.lend_gpus END AS total_weight
    FROM borrowing b
    JOIN team_lending tl ON tl.pool_id = b.pool_id AND tl.t <= b.t AND b.t < tl.t_next
    WHERE b.borrowed_gpus > 0 AND (tl.over_gpus > 0 OR tl.lend_gpus > 0)
),
apportioned AS (
    SELECT team_id, pool_id, t, seconds, is_borrower,
           div(borrowed_gpus * weight, total_weight)
           + CASE WHEN row_number() OVER by_remainder
                       <= borrowed_gpus - sum(div(borrowed_gpus * weight, total_weight)) OVER side
                  THEN 1 ELSE 0 END AS gpus
    FROM shares
    WINDOW side AS (PARTITION BY pool_id, t, is_borrower),
           by_remainder AS (PARTITION BY pool_id, t, is_borrower
                            ORDER BY mod(borrowed_gpus * weight, total_weight) DESC, team_id)
),
lending AS (
    SELECT team_id, pool_id, {lending_bucket} AS bucket,
           coalesce(sum(gpus * seconds) FILTER (WHERE NOT is_borrower), 0) AS lent,
           coalesce(sum(gpus * seconds) FILTER (WHERE is_borrower), 0) AS borrowed
    FROM apportioned
    GROUP BY team_id, pool_id, bucket
)
SELECT m.team_id, m.pool_id, m.bucket, m.reserved, m.in_reservation, m.overage, m.spill,
       coalesce(l.lent, 0) AS lent, coalesce(l.borrowed, 0) AS borrowed,
       m.overage - coalesce(l.borrowed, 0) AS unreserved
FROM metered m
LEFT JOIN lending l ON l.team_id = m.team_id AND l.pool_id = m.pool_id AND l.bucket IS NOT DISTINCT FROM m.bucket
{team_filter}
"""

_DAY_BOUNDARIES = """
    UNION ALL
    SELECT keys.team_id, keys.pool_id, boundary, 0, 0, 0
    FROM (SELECT team_id, pool_id FROM used UNION SELECT team_id, pool_id FROM reserved) keys
    CROSS JOIN generate_series(%(start)s + interval '1 day', %(end)s - interval '1 microsecond', interval '1 day')
        AS boundary
"""


@dataclass(frozen=True)
class Metered:
    """GPU-seconds of one team in one pool over one period (or one day of it). `overage` = `unreserved` +
    `borrowed`; `lent` is what the team's idle reserved GPUs served to borrowers."""

    team_id: int
    pool_id: int
    day: date | None
    reserved: Decimal
    in_reservation: Decimal
    overage: Decimal
    spill: Decimal
    lent: Decimal
    borrowed: Decimal
    unreserved: Decimal


def metering_sql(*, by_day: bool, team_ids: list[int] | None = None) -> str:
    """The metering query; parameters `start`, `end`, `now` (and `team_ids` when given).

    `start` and `end` must be UTC midnights when `by_day` is set; `end` must not be after `now`. `team_ids` only
    narrows the rows returned: who lends to whom depends on every team of a pool, so all are metered.
    """
    return _METERING_SQL.format(
        lendable_gpus=lendable_gpus_sql(gpus="r.gpus", lending="lp.lending", protected_gpus="lp.protected_gpus"),
        default_lending=Lending.IDLE.value,
        day_boundaries=_DAY_BOUNDARIES if by_day else "",
        bucket="(t AT TIME ZONE 'UTC')::date" if by_day else "NULL::date",
        lending_bucket="(t AT TIME ZONE 'UTC')::date" if by_day else "NULL::date",
        team_filter="WHERE m.team_id = ANY(%(team_ids)s)" if team_ids is not None else "",
    )


def check_period(start: datetime, end: datetime, now: datetime) -> None:
    if end > now:
        raise ValueError(f"cannot meter up to {end:%Y-%m-%d %H:%M}: it is after now ({now:%Y-%m-%d %H:%M})")
    if start.utcoffset() is None or end.utcoffset() is None or now.utcoffset() is None:
        raise ValueError("metering needs timezone-aware datetimes")


def meter(
    *, start: datetime, end: datetime, now: datetime, by_day: bool = False, team_ids: list[int] | None = None
) -> list[Metered]:
    """R, U, O, S and lent / borrowed / unreserved in exact GPU-seconds per team and pool over [start, end),
    straight from the intervals, reservations and lending changes.

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
