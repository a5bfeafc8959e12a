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
not cover, up to Σ idle lendable, is borrowed: B GPUs, shared exactly pro rata — a borrower's part is B × its
overage / Σ overage, a lender's B × its idle lendable / Σ idle lendable — so at every moment Σ lent = Σ borrowed =
B. Those parts are rational; they are summed per team and UTC day — running sums per pool, in time order, of
B / Σ overage × seconds and B / Σ idle lendable × seconds (24 decimal places), read at each team event and at its next
one (two sorts and window passes, linear; pairing every team segment with every pool segment it covers was quadratic
per pool) — and each day's parts are rounded to the GPU-microsecond by largest remainder (remainders compared to 15
places; ties: lower team id), so that per pool and day Σ lent = Σ borrowed = Σ B × seconds exactly, to the last
Decimal digit. Days are the rounding unit in both modes (midnights are always change points), so the days of a
month add up exactly to the month metered in one go.
"""

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.db import connection, transaction

from pools.choices import Lending, lendable_gpus_sql

# Sorting a month of events for the window functions wants memory rather than temporary files.
METERING_WORK_MEM = "256MB"


def prepare_session(cursor) -> None:
    """Settings of the metering transaction: memory for its sorts, and no JIT compilation. The planner cannot see
    into the CTEs, overestimates them by orders of magnitude, and would compile for seconds (2.3 s of a 5.1 s query
    at 2,000,000 intervals, seen in EXPLAIN ANALYZE) what runs in milliseconds."""
    cursor.execute("SET LOCAL work_mem = %s", [METERING_WORK_MEM])
    cursor.execute("SET LOCAL jit = off")


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
-- The levels of every team and pool at each of its events; for lending (reserved pools), its overage and idle
-- lendable GPUs there and their changes since its previous event. Several events at one instant are peers of the
-- sums' (default, RANGE) frame, so all of them carry the levels after the instant: only the first has a change (LAG),
-- only one has a next instant after it (LEAD; the others' segments are empty), whatever order the ties come in.
levels AS (
    SELECT team_id, pool_id, t, in_reserved_pool, contracted_gpus, used_gpus, reserved_gpus, t_next,
           over_gpus, lend_gpus,
           over_gpus - lag(over_gpus, 1, 0) OVER w AS over_delta,
           lend_gpus - lag(lend_gpus, 1, 0) OVER w AS lend_delta,
           reserved_gpus - lag(reserved_gpus, 1, 0) OVER w AS reserved_delta
    FROM (
        SELECT team_id, pool_id, t, in_reserved_pool, contracted_gpus, used_gpus, reserved_gpus, t_next,
               greatest(used_gpus - reserved_gpus, 0) AS over_gpus,
               least(greatest(reserved_gpus - used_gpus, 0), lendable_gpus) AS lend_gpus
        FROM (
            SELECT e.team_id, e.pool_id, e.t, p.kind = 'reserved' AS in_reserved_pool, p.contracted_gpus,
                   (sum(e.used_delta) OVER w)::int AS used_gpus,
                   (sum(e.reserved_delta) OVER w)::int AS reserved_gpus,
                   (sum(e.lendable_delta) OVER w)::int AS lendable_gpus,
                   lead(e.t) OVER w AS t_next
            FROM events e
            JOIN pools_pool p ON p.id = e.pool_id
            WINDOW w AS (PARTITION BY e.team_id, e.pool_id ORDER BY e.t)
        ) summed
    ) leveled
    WINDOW w AS (PARTITION BY team_id, pool_id ORDER BY t)
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
-- Lending, reserved pools only. The teams' events of a pool in time order (one sort): running sums of the changes
-- of their overage, idle lendable and reserved GPUs give the pool's levels after each instant (the RANGE frame makes
-- all events of one instant peers, so they all carry the levels after it); the last event of each instant (in the
-- sort's order: LEAD gives it the pool's next instant, and its peers the instant itself) stands for the pool segment
-- that starts there.
pool_events AS (
    SELECT team_id, pool_id, t, over_gpus, lend_gpus, pool_over, pool_lend,
           CASE WHEN borrowed_gpus > 0 THEN borrowed_gpus * seconds END AS borrowed_gpu_seconds
    FROM (
        SELECT team_id, pool_id, t, over_gpus, lend_gpus,
               CASE WHEN pool_t_next > t THEN extract(epoch FROM pool_t_next - t) END AS seconds,
               least(greatest(pool_over - greatest(coalesce(contracted_gpus, 0) - pool_reserved, 0), 0), pool_lend)
                   AS borrowed_gpus,
               pool_over, pool_lend
        FROM (
            SELECT team_id, pool_id, t, contracted_gpus, over_gpus, lend_gpus,
                   (sum(over_delta) OVER wp)::int AS pool_over,
                   (sum(lend_delta) OVER wp)::int AS pool_lend,
                   (sum(reserved_delta) OVER wp)::int AS pool_reserved,
                   lead(t) OVER wp AS pool_t_next
            FROM levels
            WHERE in_reserved_pool
            WINDOW wp AS (PARTITION BY pool_id ORDER BY t)
        ) pooled
    ) borrowing
),
-- Per pool segment the overage the unreserved GPUs (contracted − Σ reservations) do not cover, up to what the lenders
-- lend idle, is borrowed from lenders (B GPUs). As running sums over the pool's segments before each instant: the
-- borrowed GPU-seconds per GPU of overage (B / Σ overage × seconds) and per idle lendable GPU (B / Σ idle lendable ×
-- seconds), to 24 decimal places. A borrower's exact share of a stretch [t, t') where its overage is constant is its
-- overage × the difference of the first sum at t' and at t; a lender's, its idle lendable GPUs × that of the second.
pool_sums AS (
    SELECT team_id, pool_id, t, over_gpus, lend_gpus,
           -- Σ up to and including the instant, less the instant's own segment (only one of its events has one)
           coalesce(sum(over_rate) OVER upto, 0) - coalesce(max(over_rate) OVER instant, 0) AS per_over,
           coalesce(sum(lend_rate) OVER upto, 0) - coalesce(max(lend_rate) OVER instant, 0) AS per_lend
    FROM (
        SELECT team_id, pool_id, t, over_gpus, lend_gpus,
               borrowed_gpu_seconds::numeric(40, 24) / pool_over AS over_rate,
               borrowed_gpu_seconds::numeric(40, 24) / pool_lend AS lend_rate
        FROM pool_events
    ) rates
    WINDOW upto AS (PARTITION BY pool_id ORDER BY t), instant AS (PARTITION BY pool_id, t)
),
-- Each borrower's and lender's exact share per UTC day (a team's segments never cross midnight: midnights are change
-- points of every team): the running sums at its event and at its next one (a second sort, by team).
team_segments AS (
    SELECT team_id, pool_id, t, over_gpus, lend_gpus, per_over, per_lend,
           lead(t) OVER wt AS t_next, lead(per_over) OVER wt AS next_per_over, lead(per_lend) OVER wt AS next_per_lend
    FROM pool_sums
    WINDOW wt AS (PARTITION BY team_id, pool_id ORDER BY t)
),
team_day AS (
    SELECT team_id, pool_id, (t AT TIME ZONE 'UTC')::date AS day, over_gpus > 0 AS is_borrower,
           sum(CASE WHEN over_gpus > 0 THEN over_gpus * (next_per_over - per_over)
                    ELSE lend_gpus * (next_per_lend - per_lend) END) AS exact
    FROM team_segments
    WHERE t_next > t AND (over_gpus > 0 OR lend_gpus > 0)
    GROUP BY team_id, pool_id, day, is_borrower
),
-- What lenders lent and borrowers borrowed per pool and day, exact: Σ B × seconds.
pool_day AS (
    SELECT pool_id, (t AT TIME ZONE 'UTC')::date AS day, sum(borrowed_gpu_seconds) AS total
    FROM pool_events
    WHERE borrowed_gpu_seconds > 0
    GROUP BY pool_id, day
),
-- The exact shares in GPU-microseconds: each its floor, and the microseconds left (total − Σ floors, fewer than the
-- teams) one each to the largest remainders (ties: lower team id), so that per pool and day Σ lent = Σ borrowed =
-- the total to the last digit.
floored AS (
    SELECT td.team_id, td.pool_id, td.day, td.is_borrower, pd.total,
           trunc(td.exact, 6) AS floor_share, round(td.exact - trunc(td.exact, 6), 15) AS remainder
    FROM team_day td
    JOIN pool_day pd ON pd.pool_id = td.pool_id AND pd.day = td.day
),
apportioned AS (
    SELECT team_id, pool_id, day, is_borrower,
           floor_share + CASE WHEN row_number() OVER by_remainder
                                   <= round((total - sum(floor_share) OVER side) * 1000000)
                              THEN 0.000001 ELSE 0 END AS share
    FROM floored
    WINDOW side AS (PARTITION BY pool_id, day, is_borrower),
           by_remainder AS (PARTITION BY pool_id, day, is_borrower ORDER BY remainder DESC, team_id)
),
lending AS (
    SELECT team_id, pool_id, {lending_bucket} AS bucket,
           coalesce(sum(share) FILTER (WHERE NOT is_borrower), 0) AS lent,
           coalesce(sum(share) FILTER (WHERE is_borrower), 0) AS borrowed
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

# Every UTC midnight inside the period, a change point of every team and pool (it changes nothing): daily rollups are
# grouped by day, and lending's shares are rounded per pool and day in both modes (so that days add up to the month).
_DAY_BOUNDARIES = """
    UNION ALL
    SELECT keys.team_id, keys.pool_id, boundary, 0, 0, 0
    FROM (SELECT team_id, pool_id FROM used UNION SELECT team_id, pool_id FROM reserved) keys
    CROSS JOIN generate_series(
        (date_trunc('day', %(start)s AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC',
        %(end)s - interval '1 microsecond',
        interval '1 day'
    ) AS boundary
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
        day_boundaries=_DAY_BOUNDARIES,
        bucket="(t AT TIME ZONE 'UTC')::date" if by_day else "NULL::date",
        lending_bucket="day" if by_day else "NULL::date",
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
        prepare_session(cursor)
        cursor.execute(metering_sql(by_day=by_day, team_ids=team_ids), params)
        return [Metered(*row) for row in cursor.fetchall()]
