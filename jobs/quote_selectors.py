"""The quote's inputs from the database, and the quotes pages and the API show (the submit preview's, with its
alternatives: `jobs.quote_preview`).

Each rule is read from its one place: the room a team has in a pool from `jobs.selectors.quota_room` (Kueue's
own sum over reservations, lending and the cohort), the GPUs a team's jobs hold from `JobQuerySet.in_use`, and what
its reservation lends now from `pools.lending.pool_lending`, its reservation from `pools.lending.team_uses`. The history
is the team's most recent finished jobs (finished before now), as fractions of their maximum run time; the path's
delay is read off the portal's most recent starts (`start_delays`), the team's next submissions off its recent ones
(`recent_submissions`). A fixed number of queries, whatever the number of teams and jobs (`team_queues`).
"""

from datetime import datetime

from django.db import connection
from django.db.models import Max
from django.utils import timezone

from pools.choices import PoolKind
from pools.lending import TeamUse, most_available_to, pool_lending, team_uses
from pools.models import Pool, Quota
from pools.occupancy import pool_occupancy
from pools.selectors import spill_targets
from portal.choices import QueueingStrategy
from portal.models import Team
from portal.snapshot import one_snapshot

from .choices import ACTIVE_STATES, ADMITTED_STATES, FINAL_STATES, NOT_STARTED_STATES, JobState, Placement
from .quote import (
    ARRIVALS,
    DELAY_SIZE,
    HISTORY_SIZE,
    STARTS_NOW_WITHIN,
    STOP_SIZE,
    Holding,
    Quote,
    RunHistory,
    StartDelay,
    StopTimes,
    TeamQueue,
    Waiting,
    arrivals,
    quote_queue,
)
from .quote_words import QuoteWords, worded
from .selectors import quota_room
from .specs import max_grace_seconds

_SOFT = str(
    Placement.SOFT
)  # the plain string: comparing with the enum member cost more than the rest of `admissible_pools`


def admissible_pools(*, pool_id: int, placement: str, spilled: bool, spill: dict) -> tuple[int, ...]:
    """The pools a job may be admitted in: its home pool, and the spill pools once its placement is soft."""
    if spilled or placement == _SOFT:
        return (pool_id, *spill.get(pool_id, ()))
    return (pool_id,)


# Per team, its last HISTORY_SIZE jobs that ran and finished by a moment: a LATERAL index-only scan of
# jobs_job_team_finished_runs for each team, so the cost follows the teams asked for, not the years of history kept.
# One row per team, its fractions (clamped to [0, 1]) in one sorted array: a row per job cost four times the query's
# time in the client (20,000 rows for 100 teams).
_RUN_FRACTIONS = """
SELECT team.id, ARRAY(
    SELECT recent.fraction FROM (
        SELECT LEAST(GREATEST(
                   EXTRACT(EPOCH FROM job.finished_at - job.started_at)::float8
                   / (GREATEST(job.max_run_minutes, 1) * 60), 0), 1) AS fraction
        FROM jobs_job AS job
        WHERE job.team_id = team.id AND job.finished_at IS NOT NULL AND job.finished_at <= %(now)s
          AND job.started_at IS NOT NULL AND job.state = ANY(%(states)s)
        ORDER BY job.finished_at DESC
        LIMIT %(limit)s
    ) AS recent
    ORDER BY recent.fraction
)
FROM unnest(%(teams)s::bigint[]) AS team(id)
"""


def run_fractions(team_ids, *, now: datetime) -> dict[int, list[float]]:
    """Per team with any: how much of their maximum run time its last `HISTORY_SIZE` jobs that ran and finished
    before `now` ran (fractions in [0, 1], in ascending order, computed in the database: only numbers cross the wire).
    One query."""
    team_ids = sorted(set(team_ids))
    if not team_ids:
        return {}
    parameters = {"teams": team_ids, "now": now, "states": sorted(FINAL_STATES), "limit": HISTORY_SIZE}
    with connection.cursor() as cursor:
        cursor.execute(_RUN_FRACTIONS, parameters)
        return {team_id: fractions for team_id, fractions in cursor.fetchall() if fractions}


# The path's delay of the platform's most recent starts (up to DELAY_SIZE, every team's: the path is the platform's,
# the submit task, Kueue, the scheduler, the nodes): from a job's submission to when the portal first saw it Running
# (`running_seen_at`, the portal's own clock, as is the submission's), without its wait for room: the time between
# its first Workload's creation and admission when that is over a second. Those two times are the cluster's,
# truncated to the second, so a shorter gap is not told from Kueue's own work, which is the path's (a job that
# starts at once waits for it too). Kueue requeues a preempted job's Workload and stamps its new admission on it: a
# Workload admitted after the first start tells nothing of it, and is passed over.
#
# A start that stopped other jobs first (`stopping`: an admitted job of its pool, its pods running or not yet, went
# back to the queue between its submission and its start, the index jobs_event_requeued) is Kueue's preemption or
# reclaim: it evicts, waits for the victims' quota and admits in a later cycle, a second or two after the Workload's
# creation (three in the cluster's truncated seconds), so only a longer gap is its wait for room. Such starts are
# read apart (`StartDelay`): in the priority replay they took 1.0-2.0 s where the others took 0.1-0.3 s, and one
# distribution of both put the estimate between them, wrong for either. How many jobs went back (`stopped`) is
# counted too: a start that stopped one took 0.75 s at the median there, one that stopped two or more 1.4 s.
_START_DELAYS = """
SELECT EXTRACT(
           EPOCH FROM recent.running_seen_at - recent.created_at
           - CASE WHEN recent.admitted_at - recent.workload_created_at
                       > CASE WHEN recent.stopped > 0 THEN %(stopping_cycle)s ELSE 1 END * interval '1 second'
                  THEN recent.admitted_at - recent.workload_created_at ELSE interval '0' END
       )::float8,
       recent.stopped
FROM (
    SELECT starts.*, row_number() OVER (PARTITION BY starts.stopped > 0 ORDER BY starts.running_seen_at DESC) AS rank
    FROM (
        SELECT job.created_at, job.running_seen_at, workload.created_at AS workload_created_at, workload.admitted_at,
               (
                   SELECT count(DISTINCT victim.id) FROM jobs_jobevent AS event
                   JOIN jobs_job AS victim ON victim.id = event.job_id
                   WHERE event.from_state IN %(admitted)s AND event.to_state = %(queued)s
                     AND event.at >= job.created_at AND event.at <= job.running_seen_at AND victim.id <> job.id
                     AND COALESCE(job.admitted_pool_id, job.pool_id) IN (victim.pool_id, victim.admitted_pool_id)
               ) AS stopped
        FROM jobs_job AS job
        CROSS JOIN LATERAL (
            SELECT first.created_at, first.admitted_at FROM jobs_workload AS first
            WHERE first.job_id = job.id ORDER BY first.created_at LIMIT 1
        ) AS workload
        WHERE job.running_seen_at IS NOT NULL AND job.running_seen_at <= %(now)s
          AND workload.admitted_at IS NOT NULL AND workload.admitted_at <= job.running_seen_at
        ORDER BY job.running_seen_at DESC LIMIT %(scan)s
    ) AS starts
) AS recent
WHERE recent.rank <= %(limit)s
"""
STOPPING_CYCLE = 3  # seconds of Workload creation to admission that a start stopping others spends on the path
DELAY_SCAN = 10 * DELAY_SIZE  # the most recent starts looked through for up to DELAY_SIZE of each kind


def start_delays(*, now: datetime) -> tuple[list[float], list[tuple[float, int]]]:
    """The seconds the platform's most recent starts seen before `now` took on the path from submission to a Running
    pod, without their wait for room (`jobs.quote.StartDelay`): up to `DELAY_SIZE` on free room, and up to as many
    that stopped other jobs first, each with how many it stopped, among its `DELAY_SCAN` most recent. One query."""
    parameters = {
        "now": now,
        "limit": DELAY_SIZE,
        "scan": DELAY_SCAN,
        "stopping_cycle": STOPPING_CYCLE,
        # The index jobs_event_requeued's condition, the same states in the same order.
        "admitted": tuple(sorted(ADMITTED_STATES)),
        "queued": JobState.QUEUED,
    }
    with connection.cursor() as cursor:
        cursor.execute(_START_DELAYS, parameters)
        rows = cursor.fetchall()
    return [delay for delay, stopped in rows if not stopped], [(delay, stopped) for delay, stopped in rows if stopped]


# How long the pods of the platform's most recent evictions of running jobs (up to STOP_SIZE: preempted, or their
# borrowed GPUs reclaimed; the index jobs_event_evicted) took to exit, as a fraction of their grace period (the
# platform's cap applied): from when the portal saw the job go back to the queue to the end of its pods' usage
# (the pod's own end, or when the sync saw it gone). Only stops over by `now` count: none of the run's usage still
# open then. A pod that exits at once is often gone before the portal sees its Workload evicted (the pod and the
# Workload come through watches of their own; up to 2.6 s apart in the priority replay): its usage that ended up to
# `SEEN_LATE` seconds before counts as a stop at once. Reading only ends after the eviction was seen left those
# out and read the stops as slower than they were (a median of 0.7 of the grace period where most pods exited at once).
_STOP_FRACTIONS = """
SELECT LEAST(GREATEST(EXTRACT(EPOCH FROM stopped.ended - evicted.at) / evicted.grace, 0), 1)::float8
FROM (
    SELECT event.job_id, event.at, LEAST(job.termination_grace_seconds, %(cap)s) AS grace
    FROM jobs_jobevent AS event
    JOIN jobs_job AS job ON job.id = event.job_id
    WHERE event.from_state = %(running)s AND event.to_state = %(queued)s AND event.at <= %(now)s
      AND job.termination_grace_seconds > 0
    ORDER BY event.at DESC LIMIT %(limit)s
) AS evicted
CROSS JOIN LATERAL (
    SELECT max(used.ended_at) AS ended, bool_or(used.ended_at IS NULL OR used.ended_at > %(now)s) AS open
    FROM billing_usageinterval AS used
    WHERE used.job_id = evicted.job_id AND used.started_at <= evicted.at
      AND (used.ended_at IS NULL OR used.ended_at >= evicted.at - %(seen_late)s * interval '1 second')
) AS stopped
WHERE stopped.ended IS NOT NULL AND NOT stopped.open AND evicted.grace > 0
"""
SEEN_LATE = 30  # seconds a stopped pod's end may precede the portal seeing its job evicted


def stop_fractions(*, now: datetime) -> list[float]:
    """The fractions of their grace period the pods of the platform's `STOP_SIZE` most recent evictions of running
    jobs before `now` took to exit (`jobs.quote.StopTimes`). One query."""
    parameters = {
        "cap": max_grace_seconds(),
        "running": JobState.RUNNING,
        "queued": JobState.QUEUED,
        "now": now,
        "limit": STOP_SIZE,
        "seen_late": SEEN_LATE,
    }
    with connection.cursor() as cursor:
        cursor.execute(_STOP_FRACTIONS, parameters)
        return [fraction for (fraction,) in cursor.fetchall()]


# Per team, its ARRIVALS most recent submissions before a moment, whatever became of them: among its last finished
# jobs (the index jobs_job_team_finished_runs) and those not finished (queued or holding GPUs).
_RECENT_SUBMISSIONS = """
SELECT team.id, recent.created_at, recent.pool_id, recent.total_gpus, recent.max_run_minutes, recent.placement,
       recent.priority, recent.termination_grace_seconds
FROM unnest(%(teams)s::bigint[]) AS team(id)
CROSS JOIN LATERAL (
    SELECT * FROM (
        (SELECT finished.created_at, finished.pool_id, finished.total_gpus, finished.max_run_minutes,
                finished.placement, finished.priority, finished.termination_grace_seconds
         FROM jobs_job AS finished
         WHERE finished.team_id = team.id AND finished.finished_at IS NOT NULL
         ORDER BY finished.finished_at DESC LIMIT %(limit)s)
        UNION ALL
        (SELECT open.created_at, open.pool_id, open.total_gpus, open.max_run_minutes, open.placement, open.priority,
                open.termination_grace_seconds
         FROM jobs_job AS open
         WHERE open.team_id = team.id AND open.finished_at IS NULL AND open.state = ANY(%(open)s))
    ) AS job
    WHERE job.created_at <= %(now)s
    ORDER BY job.created_at DESC LIMIT %(limit)s
) AS recent
"""


def recent_submissions(team_ids, *, now: datetime, spill: dict) -> dict[int, list[tuple[datetime, Waiting]]]:
    """Per team: its `ARRIVALS` most recent submissions before `now` (when, and the job as it would wait), what
    `jobs.quote.arrivals` foresees the next ones from. One query."""
    team_ids = sorted(set(team_ids))
    if not team_ids:
        return {}
    parameters = {"teams": team_ids, "now": now, "limit": ARRIVALS, "open": sorted(ACTIVE_STATES)}
    with connection.cursor() as cursor:
        cursor.execute(_RECENT_SUBMISSIONS, parameters)
        rows = cursor.fetchall()
    cap = max_grace_seconds()
    submissions: dict[int, list[tuple[datetime, Waiting]]] = {}
    for team_id, created_at, pool_id, gpus, max_run, placement, priority, grace in rows:
        where = admissible_pools(pool_id=pool_id, placement=placement, spilled=False, spill=spill)
        submissions.setdefault(team_id, []).append(
            (created_at, Waiting(None, gpus, max_run * 60, where, priority, min(grace, cap)))
        )
    return submissions


def team_queues(team_ids, *, now: datetime | None = None, extra_pools: dict | None = None) -> dict[int, TeamQueue]:
    """The `TeamQueue` of each team of `team_ids`: its queued jobs in Kueue's order (priority, then submission), its
    room in every pool they, their spill pools or `extra_pools` ({team id: pool ids}) name, what its jobs hold, what
    its reservations lend out and its history. About a dozen queries, whatever the number of teams and jobs, all on
    one snapshot (`portal.snapshot`): a job Kueue admits meanwhile is either still queued in all of them or holding
    GPUs in all of them, never queued in one and counted in the team's use in another (its GPUs then lost from the
    team's room, and a job behind it quoted as never starting)."""
    with one_snapshot():
        return _team_queues(team_ids, now=now, extra_pools=extra_pools)


def _team_queues(team_ids, *, now: datetime | None, extra_pools: dict | None) -> dict[int, TeamQueue]:
    from .models import Job

    now = now or timezone.now()
    team_ids = set(team_ids)
    if not team_ids:
        return {}
    strategies = dict(Team.objects.filter(pk__in=team_ids).values_list("id", "queueing_strategy"))
    spill = spill_targets()
    queued = list(
        Job.objects.filter(team__in=team_ids, state=JobState.QUEUED)
        .order_by("team_id", "-priority", "created_at", "id")
        .values_list(
            "id",
            "team_id",
            "pool_id",
            "total_gpus",
            "max_run_minutes",
            "placement",
            "spilled",
            "priority",
            "termination_grace_seconds",
            "created_at",
            "gpus",
        )
    )
    holding = list(
        Job.objects.filter(team__in=team_ids)
        .in_use()
        .values_list(
            "team_id",
            "quota_pool",
            "total_gpus",
            "started_at",
            "state_changed_at",
            "max_run_minutes",
            "priority",
            "termination_grace_seconds",
        )
    )
    waiting: dict[int, list[Waiting]] = {team_id: [] for team_id in team_ids}
    pairs = {(team_id, pool_id) for team_id, pools in (extra_pools or {}).items() for pool_id in pools}
    cap = max_grace_seconds()
    for job_id, team_id, pool_id, gpus, max_run, placement, spilled, priority, grace, created_at, per_node in queued:
        where = admissible_pools(pool_id=pool_id, placement=placement, spilled=spilled, spill=spill)
        waiting[team_id].append(
            Waiting(job_id, gpus, max_run * 60, where, priority, min(grace, cap), created_at, per_node)
        )
        pairs.update((team_id, each) for each in where)
    pairs.update((team_id, pool_id) for team_id, pool_id, *_rest in holding)
    quotas = {
        (team, pool): gpus
        for team, pool, gpus in Quota.objects.filter(team__in=team_ids).values_list("team_id", "pool_id", "max_gpus")
    }
    pools = {pool.pk: pool for pool in Pool.objects.filter(pk__in={p for _t, p in pairs})}
    uses = team_uses(sorted(pools), now=now)
    lending = pool_lending(pools=list(pools.values()), now=now, uses=uses)
    room = quota_room(pairs, quotas=quotas, now=now, pools=pools, uses=uses, lending=lending)
    reclaim = _reclaims(team_ids, list(pools.values()), now=now, uses=uses, lending=lending)
    fractions = run_fractions(team_ids, now=now)
    delay = StartDelay.fitted(*start_delays(now=now))
    stops = StopTimes.fitted(stop_fractions(now=now))
    free_blocks = {pool_id: each.largest_free_block for pool_id, each in pool_occupancy(sorted(pools)).items()}
    submitted = recent_submissions(team_ids, now=now, spill=spill)
    rooms: dict[int, dict[int, int]] = {team_id: {} for team_id in team_ids}
    ceilings: dict[int, dict[int, int]] = {team_id: {} for team_id in team_ids}
    for (team_id, pool_id), (_quota, left) in room.items():
        rooms.setdefault(team_id, {})[pool_id] = max(left, 0)
        use = uses.get(pool_id, {}).get(team_id) or TeamUse(team_id=team_id)
        ceilings.setdefault(team_id, {})[pool_id] = most_available_to(
            use, quota=quotas.get((team_id, pool_id), 0), cohort_quota=lending[pool_id].cohort_quota
        )
    pool_names = {pool.pk: pool.name for pool in pools.values()}
    queues = {}
    for team_id in team_ids:
        queues[team_id] = TeamQueue(
            team_id=team_id,
            best_effort=strategies.get(team_id) == QueueingStrategy.BEST_EFFORT_FIFO,
            room=rooms[team_id],
            ceiling=ceilings[team_id],
            holding=[],
            waiting=waiting[team_id],
            history=RunHistory.fitted(fractions.get(team_id, [])),
            reclaim=reclaim.get(team_id, {}),
            pool_names=pool_names,
            delay=delay,
            stops=stops,
            free_blocks=free_blocks,
            reserved={
                pool_id: teams[team_id].reserved for pool_id, teams in uses.items() if teams.get(team_id) is not None
            },
            arrivals=arrivals(submitted.get(team_id, []), now=now, count=ARRIVALS),
        )
    for team_id, pool_id, gpus, started_at, changed_at, max_run, priority, grace in holding:
        # An admitted job not running yet has not started its clock: its deadline counts from now at the latest.
        since = started_at or max(changed_at, now)
        queues[team_id].holding.append(Holding(pool_id, gpus, since, max_run * 60, priority, min(grace, cap)))
    return queues


def _reclaims(
    team_ids, pools: list[Pool], *, now: datetime, uses: dict, lending: dict
) -> dict[int, dict[int, tuple[int, int]]]:
    """Per team and reserved pool: GPUs of its reservation other teams hold now (`lending`, the pools'
    `pool_lending`) and how long Kueue's reclaim takes — the longest grace period of the other teams' jobs there,
    capped by the platform's cap. One query."""
    from .models import Job

    reserved = [pool for pool in pools if pool.kind == PoolKind.RESERVED]
    if not reserved:
        return {}
    graces: dict[int, dict[int, int]] = {}
    for team_id, pool_id, grace in (
        Job.objects.in_use(pools=reserved)
        .values("team_id", "quota_pool")
        .annotate(grace=Max("termination_grace_seconds"))
        .values_list("team_id", "quota_pool", "grace")
        .order_by()
    ):
        graces.setdefault(pool_id, {})[team_id] = grace
    cap = max_grace_seconds()
    reclaims: dict[int, dict[int, tuple[int, int]]] = {}
    for pool_id in (pool.pk for pool in reserved):
        for team_id, lent in lending[pool_id].lent_by_team.items():
            if team_id in team_ids and lent:
                others = [g for other, g in graces.get(pool_id, {}).items() if other != team_id]
                reclaims.setdefault(team_id, {})[pool_id] = (lent, min(max(others, default=0), cap))
    return reclaims


# --- quotes of jobs ----------------------------------------------------------------------------------------------


def admitted_quote(*, now: datetime, unplaced: str | None = None) -> Quote:
    """An admitted job not running yet: Kueue has given it its GPUs, its pods are being placed. When the scheduler
    has found no node for one of them (`unplaced`: its message), no time is quoted: the job waits for a node (one
    freed, uncordoned or added), which nothing the portal knows foresees."""
    if unplaced is not None:
        return Quote(
            starts_now=False,
            estimate=None,
            low=None,
            high=None,
            unplaced=True,
            basis=[{"say": "unplaced", "message": unplaced}],
        )
    # Its interval is the promise of "starts now", Running within a minute: [now, now] held no real start.
    within = now + STARTS_NOW_WITHIN
    return Quote(starts_now=True, estimate=now, low=now, high=within, latest=within, basis=[{"say": "admitted"}])


def unplaced_pods(job_ids) -> dict[int, str]:
    """For each of `job_ids` with a pod the scheduler could not place (Pending, unscheduled, with the scheduler's
    reason: a pod just made that it has not looked at yet has none), the scheduler's message (the newest such pod's):
    one query."""
    from .models import Pod

    said: dict[int, str] = {}
    rows = (
        Pod.objects.filter(job_id__in=list(job_ids), phase="Pending", scheduled=False)
        .exclude(pending_reason="")
        .order_by("job_id", "-created_at")
        .values_list("job_id", "pending_reason")
    )
    for job_id, message in rows:
        said.setdefault(job_id, message)
    return said


def quotes_for(jobs, *, now: datetime | None = None) -> dict[int, Quote]:
    """A quote for each of `jobs` (Job rows) not running yet: queued ones from their team's queue, admitted ones
    "starts now", or waiting for a node while the scheduler places none of a pod. Running and finished jobs are not
    in the answer."""
    now = now or timezone.now()
    jobs = list(jobs)
    quotes: dict[int, Quote] = {}
    queued_teams = {job.team_id for job in jobs if job.state == JobState.QUEUED}
    by_team = {team_id: quote_queue(queue, now=now) for team_id, queue in team_queues(queued_teams, now=now).items()}
    admitted = [job.pk for job in jobs if job.state != JobState.QUEUED and job.state in NOT_STARTED_STATES]
    unplaced = unplaced_pods(admitted) if admitted else {}
    for job in jobs:
        if job.state == JobState.QUEUED:
            quote = by_team.get(job.team_id, {}).get(job.pk)
            if quote is not None:
                quotes[job.pk] = quote
        elif job.state in NOT_STARTED_STATES:
            quotes[job.pk] = admitted_quote(now=now, unplaced=unplaced.get(job.pk))
    return quotes


def worded_quotes(job_ids, *, shown=None, now: datetime | None = None) -> dict[int, QuoteWords]:
    """`quotes_for` the jobs of `job_ids` (the caller has checked the viewer may see them), in the active language;
    only those of `shown` when given (a page quotes every visible queued job's team, so that it runs the same
    queries whichever rows it shows, and words its own rows). Two queries more than `team_queues`; none when no job
    is given."""
    from .models import Job

    now = now or timezone.now()
    job_ids = list(job_ids)
    if not job_ids:
        return {}
    shown = set(job_ids if shown is None else shown)
    jobs = Job.objects.filter(pk__in=job_ids).only("id", "team_id", "state")
    return {job_id: worded(quote, now=now) for job_id, quote in quotes_for(jobs, now=now).items() if job_id in shown}


def quote_history(job, *, now: datetime | None = None) -> list[tuple[datetime, QuoteWords]]:
    """The quotes kept for `job` as its queue moved (`services.record_quotes`), oldest first, in words."""
    now = now or timezone.now()
    return [(kept.at, worded(kept.as_quote(), now=now)) for kept in job.quotes.order_by("at", "id")]
