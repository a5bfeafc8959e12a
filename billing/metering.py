"""Metering in PostgreSQL: GPU-seconds R, U, O and S of each team and pool over a period, exactly.

The idea: for one team and one pool, usage is a step function of time — the sum of `gpus` of the team's
intervals covering t — and so is the reserved level. Each interval (clipped to the period, open ones ending at
`now`) becomes two events, +gpus at its start and −gpus at its end; each reservation the same on the reserved
level. A running SUM over the events ordered by time gives both levels on every segment between consecutive
change points, and LEAD gives the segment's end. Integrating over the segments:

    R = Σ reserved × duration          U = Σ min(used, reserved) × duration   (reserved pools)
    O = Σ max(0, used − reserved) × duration (reserved pools)                 S = Σ used × duration (other pools)

Several events at the same instant leave zero-length segments between them, which contribute nothing, so no
ordering among ties is needed. Every instant is a whole number of microseconds since the period's start (bigint;
PostgreSQL keeps times to the microsecond), so a segment's duration is an integer, the integrals are sums of integers
(PostgreSQL sums bigints in 128 bits), and one multiplication by 0.000001 at the end makes them exact Decimal
GPU-seconds (summing numeric products per segment made the month about 15 % slower). The microseconds are read as
`round(date_part('epoch', instant − start) × 10⁶)`: over a period of up to three years the double is within two
hundredths of a microsecond of the exact value (within the half microsecond the rounding forgives for periods up to
about seventy years), and it costs less than numeric `extract` (tests/billing/test_metering.py meters odd
microseconds over three years).

For daily rollups, a zero-change event at every UTC midnight inside the period splits the segments at day boundaries
and the result is grouped by day; because an integral is additive over disjoint periods, the days of a month add up
exactly to the month metered in one go.

Intervals without a team (pods the sync could not attribute) are not billed to anyone and are left out.

Lending extends the same steps. Each reservation's lendable GPUs (its lending setting in force, from
`pools_lendingchange`) is a third level of the team's step function, so lending changes are change points too. At each
change point a team has an overage max(0, used − reserved) and idle lendable GPUs min(max(0, reserved − used),
lendable); their changes summed per pool give, on every pool segment, the pool's Σ overage, Σ idle lendable and Σ
reserved; the pool's contract as it changed (`pools_contractchange`) is a step function of a row without a team, so its
changes are change points of the pool too. On a pool segment the overage the unreserved GPUs (contract − Σ reserved) do
not cover, up to Σ idle lendable, is borrowed: B GPUs, shared exactly pro rata — a borrower's part is B × its overage /
Σ overage, a lender's B × its idle lendable / Σ idle lendable — so at every moment Σ lent = Σ borrowed = B. Those parts
are rational; they are summed per team and UTC day from running sums per pool, in time order, of B / Σ overage × seconds
and B / Σ idle lendable × seconds (24 decimal places): P_over and P_lend. A team's part over a stretch where its level
is constant is its level × the difference of P between the stretch's ends; summed by parts, Σ level × ΔP = Σ over its
events of P × (level before − level after), so each event needs only P at its own instant and the query stays at three
passes: the teams' levels (sorted by pool, team, time), the pool's (sorted again only within each pool, by day and
time), and the sums by pool, day and team (sorted only within each day: the pools' pass leaves them in that order);
pairing every team segment with every pool segment it covers was quadratic per pool, and reading P at each event's
next one took a third full sort. Each day's parts are rounded to the GPU-microsecond by largest remainder
(remainders compared to 15 places; ties: lower team id), so that per pool and day Σ lent = Σ borrowed = Σ B × seconds
exactly, to the last Decimal digit. Days are the rounding unit in both modes (midnights are always change points), so
the days of a month add up exactly to the month metered in one go. Elastic and shared pools lend nothing and their R and
S are linear in the intervals: in that query each of their intervals and reservations is cut at midnight and its
GPU-microseconds summed per team and day by hashing, without the sort the step functions need (about a tenth of the
month's time at the benchmark's size)."""

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction

from pools.choices import Lending, lendable_gpus_sql

# Sorting a month of events for the window functions wants memory rather than temporary files.
METERING_WORK_MEM = "256MB"
# Instants are microseconds since the period's start; a UTC day has this many.
US_PER_DAY = 86_400_000_000
# The longest period one query meters (`billing.services.recompute_days` meters stale days in runs of at most this
# many): four years and a day, far within what reading the instants through a double keeps exact.
MAX_PERIOD = timedelta(days=4 * 365 + 1)
# The order of both windows of the pools' pass, written once: the second reads the first's rows in that order, with
# no sort between them, and of an instant's events both must take the same one as its last.
_POOL_ORDER = "day, t"


def prepare_session(cursor) -> None:
    """Settings of the metering transaction: memory for its sorts, and no JIT compilation. The planner cannot see
    into the CTEs, overestimates them by orders of magnitude, and would compile for seconds (2.3 s of a 5.1 s query
    at 2,000,000 intervals, seen in EXPLAIN ANALYZE) what runs in milliseconds."""
    cursor.execute("SET LOCAL work_mem = %s", [METERING_WORK_MEM])
    cursor.execute("SET LOCAL jit = off")


# The intervals and reservations of the period, clipped to it; with lending, each reservation's lendable GPUs over
# time. Then every change of a team's levels in a pool as an event.
_EVENTS_SQL = """
WITH used AS (
    SELECT i.team_id, i.pool_id, p.kind = 'reserved' AS in_reserved_pool, i.gpus,
           round(date_part('epoch', greatest(i.started_at, %(start)s) - %(start)s) * 1000000)::bigint AS s,
           round(date_part('epoch', least(coalesce(i.ended_at, %(now)s), %(end)s) - %(start)s) * 1000000)::bigint AS e
    FROM billing_usageinterval i
    JOIN pools_pool p ON p.id = i.pool_id
    WHERE i.team_id IS NOT NULL
      AND tstzrange(i.started_at, i.ended_at, '[)') && tstzrange(%(start)s, %(end)s, '[)')
),
reserved AS (
    SELECT r.id AS reservation_id, r.team_id, r.pool_id, p.kind = 'reserved' AS in_reserved_pool, r.gpus,
           greatest(r.starts_at, %(start)s) AS s_at, least(r.ends_at, %(end)s) AS e_at,
           round(date_part('epoch', greatest(r.starts_at, %(start)s) - %(start)s) * 1000000)::bigint AS s,
           round(date_part('epoch', least(r.ends_at, %(end)s) - %(start)s) * 1000000)::bigint AS e
    FROM pools_reservation r
    JOIN pools_pool p ON p.id = r.pool_id
    WHERE r.starts_at < %(end)s AND r.ends_at > %(start)s
),
{lending_periods}
{day_keys}
events AS (
    SELECT team_id, pool_id, in_reserved_pool, s AS t, gpus AS used_delta, 0 AS reserved_delta, 0 AS lendable_delta,
           0 AS midnights
    FROM used WHERE s < e
    UNION ALL SELECT team_id, pool_id, in_reserved_pool, e, -gpus, 0, 0, 0 FROM used WHERE s < e
    UNION ALL SELECT team_id, pool_id, in_reserved_pool, s, 0, gpus, 0, 0 FROM reserved
    UNION ALL SELECT team_id, pool_id, in_reserved_pool, e, 0, -gpus, 0, 0 FROM reserved
    {lendable_events}
    {day_boundaries}
),
"""

# Each reservation's lending setting over time: the default until its first change, then each change until the next
# (of changes at the same instant the last one written wins, as in pools.history.lending_at).
_LENDING_PERIODS_SQL = """
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
    SELECT r.team_id, r.pool_id, r.in_reserved_pool, {lendable_gpus} AS gpus,
           round(date_part('epoch', greatest(r.s_at, lp.p_from) - %(start)s) * 1000000)::bigint AS s,
           round(date_part('epoch', least(r.e_at, lp.p_to) - %(start)s) * 1000000)::bigint AS e
    FROM reserved r JOIN lending_periods lp ON lp.reservation_id = r.reservation_id
    WHERE greatest(r.s_at, lp.p_from) < least(r.e_at, lp.p_to)
),
-- Each reserved pool's contracted GPUs over time (`pools_contractchange`: before a pool's first change, the first;
-- a pool without changes, its contract at every moment), as the lendable level of a row without a team: it uses and
-- reserves nothing, so it lends and borrows nothing, and the pools' pass below sums it apart.
contracts AS (
    SELECT c.pool_id, c.gpus,
           round(date_part('epoch', greatest(c.p_from, %(start)s) - %(start)s) * 1000000)::bigint AS s,
           round(date_part('epoch', least(c.p_to, %(end)s) - %(start)s) * 1000000)::bigint AS e
    FROM (
        SELECT c.pool_id, c.contracted_gpus AS gpus,
               CASE WHEN row_number() OVER w = 1 THEN '-infinity'::timestamptz ELSE c.effective_from END AS p_from,
               lead(c.effective_from, 1, 'infinity'::timestamptz) OVER w AS p_to
        FROM pools_contractchange c
        WINDOW w AS (PARTITION BY c.pool_id ORDER BY c.effective_from, c.id)
        UNION ALL
        SELECT p.id, p.contracted_gpus, '-infinity'::timestamptz, 'infinity'::timestamptz
        FROM pools_pool p
        WHERE NOT EXISTS (SELECT FROM pools_contractchange c WHERE c.pool_id = p.id)
    ) c
    JOIN pools_pool p ON p.id = c.pool_id AND p.kind = 'reserved'
    WHERE greatest(c.p_from, %(start)s) < least(c.p_to, %(end)s)
),"""

_LENDABLE_EVENTS_SQL = """
    UNION ALL SELECT team_id, pool_id, in_reserved_pool, s, 0, 0, gpus, 0 FROM lendable
    UNION ALL SELECT team_id, pool_id, in_reserved_pool, e, 0, 0, -gpus, 0 FROM lendable
    UNION ALL SELECT NULL::bigint, pool_id, true, s, 0, 0, gpus, 0 FROM contracts
    UNION ALL SELECT NULL::bigint, pool_id, true, e, 0, 0, -gpus, 0 FROM contracts"""

# Without lending (the month as it was metered before lending, the benchmark's floor): one sort and one window pass.
_PLAIN_SQL = """
levels AS (
    SELECT e.team_id, e.pool_id, e.t, e.in_reserved_pool,
           (sum(e.used_delta) OVER w)::int AS used_gpus,
           (sum(e.reserved_delta) OVER w)::int AS reserved_gpus,
           lead(e.t) OVER w AS t_next
    FROM events e
    WINDOW w AS (PARTITION BY e.team_id, e.pool_id ORDER BY e.t)
),
metered AS (
    SELECT team_id, pool_id, {bucket} AS bucket,
           coalesce(sum(reserved_gpus * us), 0) * 0.000001 AS reserved,
           coalesce(sum(least(used_gpus, reserved_gpus) * us) FILTER (WHERE in_reserved_pool), 0) * 0.000001
               AS in_reservation,
           coalesce(sum(greatest(used_gpus - reserved_gpus, 0) * us) FILTER (WHERE in_reserved_pool), 0)
               * 0.000001 AS overage,
           coalesce(sum(used_gpus * us) FILTER (WHERE NOT in_reserved_pool), 0) * 0.000001 AS spill
    FROM (SELECT *, t_next - t AS us FROM levels WHERE t_next > t) segments
    GROUP BY team_id, pool_id, bucket
)
SELECT m.team_id, m.pool_id, m.bucket, m.reserved, m.in_reservation, m.overage, m.spill,
       0::numeric AS lent, 0::numeric AS borrowed, m.overage AS unreserved
FROM metered m
{team_filter}
"""

_LENDING_SQL = """
-- Reserved pools. The levels of every team after each of its events, in one pass sorted by pool, then team, then
-- time (so that the pool pass below only sorts within each pool): running sums over the rows so far (a ROWS frame: of
-- several events at one instant, the last in the sort's order carries the levels after the instant and is the only
-- one whose segment, to its next event, is not empty), the levels before the event (the sums less its own changes),
-- its day (the midnights passed since the period's start: midnights are events of every team and pool), and its
-- overage and idle lendable GPUs after and before the event. The pool's contract is the lendable level of the rows
-- without a team (`contracts`): their changes are `contract_delta`.
levels AS (
    SELECT pool_id, team_id, t, day, new_day, t_next, used_gpus, reserved_gpus, reserved_delta,
           CASE WHEN team_id IS NULL THEN lendable_delta ELSE 0 END AS contract_delta,
           greatest(used_gpus - reserved_gpus, 0) AS over_gpus,
           least(greatest(reserved_gpus - used_gpus, 0), lendable_gpus) AS lend_gpus,
           greatest(used_before - reserved_before, 0) AS over_before,
           least(greatest(reserved_before - used_before, 0), lendable_before) AS lend_before
    FROM (
        SELECT *,
               used_gpus - used_delta AS used_before,
               reserved_gpus - reserved_delta AS reserved_before,
               lendable_gpus - lendable_delta AS lendable_before
        FROM (
            SELECT e.pool_id, e.team_id, e.t, e.used_delta, e.reserved_delta, e.lendable_delta,
                   e.midnights = 1 AS new_day,
                   (sum(e.used_delta) OVER w)::int AS used_gpus,
                   (sum(e.reserved_delta) OVER w)::int AS reserved_gpus,
                   (sum(e.lendable_delta) OVER w)::int AS lendable_gpus,
                   (sum(e.midnights) OVER w)::int AS day,
                   lead(e.t) OVER w AS t_next
            FROM events e
            WHERE e.in_reserved_pool
            WINDOW w AS (PARTITION BY e.pool_id, e.team_id ORDER BY e.t ROWS UNBOUNDED PRECEDING)
        ) summed
    ) leveled
),
-- The teams' events of a pool in time order: running sums of the changes of their overage, idle lendable and
-- reserved GPUs give the pool's levels; the last event of each instant (in the sort's order: LEAD gives it the pool's
-- next instant, the others the instant itself) carries the levels after the instant and stands for the pool segment
-- that starts there. On a pool segment the overage the unreserved GPUs (contract − Σ reservations) do not cover, up
-- to what the lenders lend idle, is borrowed from lenders: B GPUs; the segment's B × seconds per GPU of overage and
-- per idle lendable GPU (24 decimal places; B × microseconds over the GPUs × 10⁶) are its rates.
pooled AS (
    SELECT pool_id, team_id, t, day, new_day, t_next, used_gpus, reserved_gpus, over_gpus, lend_gpus, over_before,
           lend_before, borrowed_gpu_us,
           borrowed_gpu_us::numeric(40, 24) / (pool_over * 1000000::bigint) AS over_rate,
           borrowed_gpu_us::numeric(40, 24) / (pool_lend * 1000000::bigint) AS lend_rate
    FROM (
        SELECT *,
               CASE WHEN pool_t_next > t AND borrowed_gpus > 0
                    THEN borrowed_gpus * (pool_t_next - t) END AS borrowed_gpu_us
        FROM (
            SELECT *,
                   least(greatest(pool_over - greatest(pool_contract - pool_reserved, 0), 0), pool_lend)
                       AS borrowed_gpus
            FROM (
                SELECT pool_id, team_id, t, day, new_day, t_next, used_gpus, reserved_gpus, over_gpus,
                       lend_gpus, over_before, lend_before,
                       (sum(over_gpus - over_before) OVER wp)::int AS pool_over,
                       (sum(lend_gpus - lend_before) OVER wp)::int AS pool_lend,
                       (sum(reserved_delta) OVER wp)::int AS pool_reserved,
                       (sum(contract_delta) OVER wp)::int AS pool_contract,
                       lead(t) OVER wp AS pool_t_next
                FROM levels
                -- in time order, by day first: the rows leave this pass in the order of the sums by pool, day and
                -- team below, which then sort only within each day whatever the planner thinks of their number (it
                -- counts a thousand rows per generate_series: hashing 46,460 groups of a month at 2,000,000
                -- intervals looks like 8 million to it, and it sorted all 2.4 million rows again, spilling 280 MB)
                WINDOW wp AS (PARTITION BY pool_id ORDER BY {pool_order} ROWS UNBOUNDED PRECEDING)
            ) pool_levels
        ) borrowing
    ) segments
),
-- The rates summed over the pool's segments before each event (NULL until the pool's first borrowing): P_over and
-- P_lend. Of an instant's own events only the last has a rate, so the rows before an event are the segments that
-- start before its instant; the same order as the pass above (no sort between them).
pool_sums AS (
    SELECT pool_id, team_id, t, day, new_day, t_next, used_gpus, reserved_gpus, over_gpus, lend_gpus, over_before,
           lend_before, borrowed_gpu_us,
           sum(over_rate) OVER before AS per_over,
           sum(lend_rate) OVER before AS per_lend
    FROM pooled
    WINDOW before AS (PARTITION BY pool_id ORDER BY {pool_order} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
-- Per team, pool and UTC day (a team's segments never cross midnight: midnights are change points of every team): the
-- step functions' integrals, and each borrower's and lender's exact share summed by parts — Σ over segments of
-- level × (P(next event) − P(event)) = Σ over events of P × (level before − level after) — so that no second sort by
-- team is needed. The term of a day's first event (at midnight) that carries the level before it belongs to the day
-- before (`*_carried`, added there below).
reserved_days AS (
    SELECT pool_id, team_id, day,
           bool_or(t_next > t) AS has_segment,
           coalesce(sum(reserved_gpus * us), 0) * 0.000001 AS reserved,
           coalesce(sum(least(used_gpus, reserved_gpus) * us), 0) * 0.000001 AS in_reservation,
           coalesce(sum(greatest(used_gpus - reserved_gpus, 0) * us), 0) * 0.000001 AS overage,
           0::numeric AS spill,
           bool_or(over_gpus > 0 AND t_next > t) AS borrows,
           bool_or(lend_gpus > 0 AND t_next > t) AS lends,
           -- (only the events that change a level, or start a day, have a term)
           sum(per_over * (CASE WHEN new_day THEN 0 ELSE over_before END - over_gpus))
               FILTER (WHERE over_gpus <> over_before OR new_day) AS borrowed_here,
           sum(per_over * over_before) FILTER (WHERE new_day) AS borrowed_carried,
           sum(per_lend * (CASE WHEN new_day THEN 0 ELSE lend_before END - lend_gpus))
               FILTER (WHERE lend_gpus <> lend_before OR new_day) AS lent_here,
           sum(per_lend * lend_before) FILTER (WHERE new_day) AS lent_carried,
           sum(borrowed_gpu_us) * 0.000001 AS pool_part
    FROM (
        SELECT *, CASE WHEN t_next > t THEN t_next - t END AS us FROM pool_sums
    ) segments
    GROUP BY pool_id, day, team_id
),
-- Elastic and shared pools lend nothing, and their integrals are linear (R = Σ GPUs × microseconds reserved, S = Σ
-- GPUs × microseconds used): each interval and reservation is cut at the midnights it crosses and its pieces summed
-- per team and day by hashing, with no sort. A piece's day is the midnights passed since the period's start, as the
-- events count them: the first midnight is `first_midnight` microseconds in (a whole day when `start` is one).
first_midnight AS (
    SELECT round(date_part('epoch', (date_trunc('day', %(start)s AT TIME ZONE 'UTC') + interval '1 day')
                                    AT TIME ZONE 'UTC' - %(start)s) * 1000000)::bigint AS us
),
other_days AS (
    SELECT pool_id, team_id, day, true AS has_segment,
           coalesce(sum(gpus * us) FILTER (WHERE is_reservation), 0) * 0.000001 AS reserved,
           0::numeric AS in_reservation, 0::numeric AS overage,
           coalesce(sum(gpus * us) FILTER (WHERE NOT is_reservation), 0) * 0.000001 AS spill
    FROM (
        SELECT x.pool_id, x.team_id, x.gpus, x.is_reservation, d::int AS day,
               least(x.e, m.us + d * {us_per_day}) - greatest(x.s, m.us + (d - 1) * {us_per_day}) AS us
        FROM first_midnight m,
             LATERAL (
                 SELECT pool_id, team_id, gpus, false AS is_reservation, s, e FROM used
                 WHERE NOT in_reserved_pool AND s < e
                 UNION ALL
                 SELECT pool_id, team_id, gpus, true, s, e FROM reserved WHERE NOT in_reserved_pool AND s < e
             ) x,
             LATERAL generate_series((x.s + {us_per_day} - m.us) / {us_per_day},
                                     (x.e - 1 + {us_per_day} - m.us) / {us_per_day}) d
    ) pieces
    GROUP BY pool_id, team_id, day
),
team_days AS (
    SELECT * FROM reserved_days
    UNION ALL
    SELECT pool_id, team_id, day, has_segment, reserved, in_reservation, overage, spill, false, false, NULL::numeric,
           NULL::numeric, NULL::numeric, NULL::numeric, NULL::numeric
    FROM other_days
),
team_day AS (
    SELECT d.team_id, d.pool_id, d.day, d.reserved, d.in_reservation, d.overage, d.spill, d.borrows, d.lends,
           coalesce(d.borrowed_here, 0) + coalesce(n.borrowed_carried, 0) AS borrowed_exact,
           coalesce(d.lent_here, 0) + coalesce(n.lent_carried, 0) AS lent_exact
    FROM team_days d
    LEFT JOIN team_days n ON n.team_id = d.team_id AND n.pool_id = d.pool_id AND n.day = d.day + 1
    WHERE d.has_segment AND d.team_id IS NOT NULL  -- (the contract's rows carry pool segments, not a team's)
),
-- What lenders lent and borrowers borrowed per pool and day, exact: Σ B × seconds.
pool_day AS (
    SELECT pool_id, day, sum(pool_part) AS total FROM team_days WHERE pool_part > 0 GROUP BY pool_id, day
),
-- The exact shares in GPU-microseconds: each its floor, and the microseconds left (total − Σ floors, fewer than the
-- teams) one each to the largest remainders (ties: lower team id), so that per pool and day Σ lent = Σ borrowed =
-- the total to the last digit.
floored AS (
    SELECT td.team_id, td.pool_id, td.day, td.is_borrower, pd.total,
           trunc(td.exact, 6) AS floor_share, round(td.exact - trunc(td.exact, 6), 15) AS remainder
    FROM (
        SELECT team_id, pool_id, day, true AS is_borrower, borrowed_exact AS exact FROM team_day WHERE borrows
        UNION ALL
        SELECT team_id, pool_id, day, false, lent_exact FROM team_day WHERE lends
    ) td
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
    SELECT team_id, pool_id, day,
           coalesce(sum(share) FILTER (WHERE NOT is_borrower), 0) AS lent,
           coalesce(sum(share) FILTER (WHERE is_borrower), 0) AS borrowed
    FROM apportioned
    GROUP BY pool_id, day, team_id
),
metered AS (
    SELECT td.team_id, td.pool_id, {day_bucket} AS bucket,
           sum(td.reserved) AS reserved, sum(td.in_reservation) AS in_reservation, sum(td.overage) AS overage,
           sum(td.spill) AS spill, coalesce(sum(l.lent), 0) AS lent, coalesce(sum(l.borrowed), 0) AS borrowed
    FROM team_day td
    LEFT JOIN lending l ON l.team_id = td.team_id AND l.pool_id = td.pool_id AND l.day = td.day
    GROUP BY td.team_id, td.pool_id, bucket
)
SELECT m.team_id, m.pool_id, m.bucket, m.reserved, m.in_reservation, m.overage, m.spill, m.lent, m.borrowed,
       m.overage - m.borrowed AS unreserved
FROM metered m
{team_filter}
"""


# Every UTC midnight inside the period, a change point of every team and pool (it changes nothing): daily rollups are
# grouped by day, and lending's shares are rounded per pool and day in both modes (so that days add up to the month).
# Without lending, a month in one go needs none; with lending, the elastic and shared pools cut their own intervals at
# midnight (`other_days`), and only the reserved pools' teams get these events.
_DAY_KEYS = """
day_keys AS (
    SELECT team_id, pool_id, in_reserved_pool FROM used
    UNION SELECT team_id, pool_id, in_reserved_pool FROM reserved{contract_keys}
),"""
_DAY_BOUNDARIES = """
    UNION ALL
    SELECT keys.team_id, keys.pool_id, keys.in_reserved_pool,
           round(date_part('epoch', boundary - %(start)s) * 1000000)::bigint, 0, 0, 0, 1
    FROM day_keys keys
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


def metering_sql(*, by_day: bool, team_ids: list[int] | None = None, lending: bool = True) -> str:
    """The metering query; parameters `start`, `end`, `now` (and `team_ids` when given).

    `start` must be a UTC midnight when `by_day` is set; `end` must not be after `now`. `team_ids` only narrows the
    rows returned: who lends to whom depends on every team of a pool, so all are metered. Without `lending`, lent and
    borrowed are 0 and all overage is unreserved: metering as it was before lending, which bench/metering.py times
    beside the real query as its floor.
    """
    team_filter = "WHERE m.team_id = ANY(%(team_ids)s)" if team_ids is not None else ""
    if not lending:
        return _EVENTS_SQL.format(
            day_keys=_DAY_KEYS.format(contract_keys="") if by_day else "",
            lending_periods="",
            lendable_events="",
            day_boundaries=_DAY_BOUNDARIES if by_day else "",
        ) + _PLAIN_SQL.format(
            bucket=f"(%(start)s AT TIME ZONE 'UTC')::date + (t / {US_PER_DAY})::int" if by_day else "NULL::date",
            team_filter=team_filter,
        )
    return _EVENTS_SQL.format(
        day_keys=_DAY_KEYS.format(contract_keys="\n    UNION SELECT NULL::bigint, pool_id, true FROM contracts"),
        lending_periods=_LENDING_PERIODS_SQL.format(
            lendable_gpus=lendable_gpus_sql(gpus="r.gpus", lending="lp.lending", protected_gpus="lp.protected_gpus"),
            default_lending=Lending.IDLE.value,
        ),
        lendable_events=_LENDABLE_EVENTS_SQL,
        day_boundaries=_DAY_BOUNDARIES,
    ) + _LENDING_SQL.format(
        day_bucket="(%(start)s AT TIME ZONE 'UTC')::date + td.day" if by_day else "NULL::date",
        team_filter=team_filter,
        us_per_day=US_PER_DAY,
        pool_order=_POOL_ORDER,
    )


def check_period(start: datetime, end: datetime, now: datetime) -> None:
    if end > now:
        raise ValueError(f"cannot meter up to {end:%Y-%m-%d %H:%M}: it is after now ({now:%Y-%m-%d %H:%M})")
    if start.utcoffset() is None or end.utcoffset() is None or now.utcoffset() is None:
        raise ValueError("metering needs timezone-aware datetimes")
    if end - start > MAX_PERIOD:
        raise ValueError(f"cannot meter more than {MAX_PERIOD.days} days at once")


def meter(
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    by_day: bool = False,
    team_ids: list[int] | None = None,
    lending: bool = True,
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
        cursor.execute(metering_sql(by_day=by_day, team_ids=team_ids, lending=lending), params)
        return [Metered(*row) for row in cursor.fetchall()]
