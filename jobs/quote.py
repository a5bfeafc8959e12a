"""When will a job start: a point estimate and an 80 % interval, from the team's queue, its room and its history.

The idea. A queued job starts when Kueue admits it, and Kueue admits it when its team's queue ahead of it has been
admitted and its team has room for its GPUs. The team's room grows at known moments: borrowed GPUs of its reservation
come back within the borrowers' grace period (Kueue reclaims them at once; a stopped pod exits between at once and its
grace period: at level q after the q-quantile of the fraction of it the platform's recently stopped pods took,
`StopTimes`; a job Kueue admits now on reclaimed GPUs runs at once when a node of its pool has its GPUs free now),
and each of its running jobs gives its GPUs back when it ends — at the latest at its deadline (start + maximum run
time), and usually sooner: how much sooner is read off the team's own history, the fraction of their maximum run time
its finished jobs really ran (an empirical distribution, fitted only on jobs already finished: never on the future).

The quote replays the team's queue forward in time, in Kueue's order (priority, then submission), once per quantile
level of that distribution: at level q every running job ends at the q-quantile of its run given how long it has run
already, and every job admitted on the way runs for the q-quantile of its maximum. Kueue's own rule decides who
starts at each moment: in a `StrictFIFO` queue no job passes the head; in a `BestEffortFIFO` one a later job that
fits starts first. Level 0.5 is the estimate, 0.1 and 0.9 bound the 80 % interval, and level 1 (every job runs to
its maximum) is the latest start the team's own jobs can cause ("by 14:05 at the latest"). A job Kueue admits at
once at every level, Running within a minute at level 0.9, "starts now". Between Kueue's admission and a Running
pod lies the path's own latency (the Job's creation, the Workload's admission, the pods' binding and start, the
portal seeing it Running): its q-quantile, read off the platform's recent starts, every team's (`StartDelay`; a
start that stops other jobs first, by preemption or reclaim, from such starts alone: Kueue takes a cycle more for
it), is added to each start at level q (to a job already submitted that Kueue may admit now, from its submission:
it has been on the path since), and each job admitted on the way runs from then.

A job that does not fit may start at once by Kueue's preemption within its team (`withinClusterQueue: LowerPriority`):
the team's lower-priority jobs in its pool stop, lowest priority and newest first, when it then fits within the team's
reservation; it starts once their pods have exited (at level q after that quantile of their grace period), or at once on
a node's free GPUs when one has room for it now (Kueue gives the victims' quota back once they are stopping), and they
go back to the queue behind their priority's queued jobs and run again. Work the team will submit is foreseen from what
it submitted (`arrivals`: its recent submissions again, as far ahead as they go back, five times over): a
higher-priority one passes a waiting job. Level 1 foresees none.

What it leaves out, on purpose: GPUs other teams free in the cohort (they only make the start earlier), what other
teams will submit (a lender reclaiming its GPUs preempts borrowed jobs), and the nodes themselves (a job Kueue
admits may wait Pending for a node: the submit preview says so beside the quote). This
module is pure: its inputs are built from the database by `jobs.quote_selectors`, with the rules' one place each
(`quota_room`, `pools.lending`, `JobQuerySet.in_use`).
"""

import heapq
import math
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import itemgetter
from typing import NamedTuple

from django.utils import timezone

LOW, ESTIMATE, HIGH, LATEST = 0.1, 0.5, 0.9, 1.0
MIN_HISTORY = 10  # fewer finished jobs than this: the prior below stands in for the team's history
HISTORY_SIZE = 200  # the team's most recent finished jobs the distribution is fitted on
# With no history: a run may end anywhere in its maximum run time, evenly (wide on purpose).
PRIOR = tuple(step / 20 for step in range(1, 21))
MIN_DELAYS = 10  # fewer measured start delays than this: none is assumed (0 s), and "starts now" spans its promise
DELAY_SIZE = 50  # the platform's most recent starts the start delay is read off
STOPPING_GROUPS = 2  # a start that stops other jobs first: its delay read apart for one stopped, and for more
STOPPING_ANY = -1  # a start that stops others, how many not known (`StartDelay.quantile`)
MIN_STOPS = 10  # fewer measured stops than this: a stop ends anywhere in its grace period, evenly
STOP_SIZE = 50  # the platform's most recent evictions the stop times are read off
ARRIVALS = 20  # the team's most recent submissions its next ones are foreseen from
ARRIVAL_REPEATS = 5  # how many stretches as long as theirs are foreseen
STARTS_NOW_WITHIN = timedelta(seconds=60)  # "starts now": Running within this at level 0.9 (issue 28's measure)


def quantile_index(level: float, size: int) -> int:
    """Which of `size` sorted values (0-based) is the `level`-quantile for a draw yet to come: the order statistic of
    rank level·(n+1), rounded away from the median (down below it, up above it). Of n values, a new draw from the
    same distribution falls below the k-th smallest with probability k/(n+1): the 10th and 90th percentile read
    as int(level·n) (the 6th and 46th of 50) held a new draw 40/51 = 78 % of the time, the 5th and 46th hold it
    41/51 = 80 %. The median is the same either way (the upper of the two middle values of an even count)."""
    position = level * (size + 1)
    rank = math.floor(position + 1e-9) if level < 0.5 else math.ceil(position - 1e-9)
    return min(max(rank, 1), size) - 1


def _clamped(ordered: list[float]) -> list[float]:
    """`ordered` (ascending) with every value in [0, 1]; as it is when it is already (the database's fractions: no
    pass over 200 values per team)."""
    if ordered and (ordered[0] < 0.0 or ordered[-1] > 1.0):
        return [min(max(value, 0.0), 1.0) for value in ordered]
    return ordered


class RunHistory:
    """The fractions of their maximum run time the team's finished jobs ran (each in [0, 1]), and its quantiles."""

    def __init__(self, fractions, *, prior: bool = False):
        self.fractions = _clamped(sorted(map(float, fractions)))
        self.prior = prior

    @classmethod
    def fitted(cls, fractions) -> "RunHistory":
        """The team's own history when it is long enough, else the wide prior."""
        fractions = list(fractions)
        if len(fractions) >= MIN_HISTORY:
            return cls(fractions)
        return cls(PRIOR, prior=True)

    @property
    def size(self) -> int:
        return 0 if self.prior else len(self.fractions)

    def quantile(self, level: float, *, after: float = 0.0) -> float:
        """The `level`-quantile of the run fraction, given the run has lasted `after` already (only runs longer
        than that are counted; when none is, the rest of the time to the deadline is spread evenly)."""
        if level >= 1.0:
            return 1.0
        first = bisect_right(self.fractions, after)
        rest = len(self.fractions) - first
        if not rest:
            return after + level * (1.0 - after)
        return max(self.fractions[first + quantile_index(level, rest)], after)


class StartDelay:
    """Seconds from the moment Kueue may admit a job to its pod Running: the path's own latency (the submit task
    creating the Job, Kueue making and admitting its Workload, the pods created, bound and started, the portal seeing
    it Running), read off the platform's most recent starts, without the time they waited for room (an empirical
    distribution, like the run times; the path is the platform's, not a team's). With fewer than `MIN_DELAYS` starts
    measured, none is assumed.

    Two paths, two distributions: a start that stops other jobs first (Kueue's preemption within the team, or its
    reclaim of lent GPUs) takes Kueue a scheduling cycle more (it evicts, waits for the victims' quota, then admits:
    a second or two where a start on free room takes a fraction of one), so those starts (`stopping`: their delays,
    each with the number of jobs it stopped) are read apart. The more jobs it stops, the longer (each victim's
    eviction is Kueue's own step: in the priority replay a start that stopped one job took 0.75 s at the median, one
    that stopped two or more 1.4 s), so a start that stops one job and one that stops more are read apart again when
    `MIN_DELAYS` of its kind were measured. With fewer than `MIN_DELAYS` stopping starts, such a start is given the
    other starts' delay."""

    def __init__(self, seconds=(), stopping=()):
        self.seconds = sorted(max(float(value), 0.0) for value in seconds)
        pairs = [(max(float(value), 0.0), max(int(jobs), 1)) for value, jobs in stopping]
        self.stopping = sorted(value for value, _jobs in pairs)
        self.stopping_by = {
            group: sorted(value for value, jobs in pairs if min(jobs, STOPPING_GROUPS) == group)
            for group in range(1, STOPPING_GROUPS + 1)
        }

    @classmethod
    def fitted(cls, seconds, stopping=()) -> "StartDelay":
        seconds, stopping = list(seconds), list(stopping)
        return cls(seconds if len(seconds) >= MIN_DELAYS else (), stopping if len(stopping) >= MIN_DELAYS else ())

    @property
    def measured(self) -> bool:
        return bool(self.seconds)

    def quantile(self, level: float, *, stopping: int = 0) -> float:
        """The `level`-quantile of the delay of a start on free room (`stopping` 0), or of one that stops `stopping`
        jobs first (any number when not known: `STOPPING_ANY`)."""
        values = self.seconds
        if stopping and self.stopping:
            group = self.stopping_by.get(min(stopping, STOPPING_GROUPS), ()) if stopping > 0 else ()
            values = group if len(group) >= MIN_DELAYS else self.stopping
        if not values:
            return 0.0
        return values[quantile_index(level, len(values))]


class StopTimes:
    """The fractions of its grace period a stopped pod (preempted, or its borrowed GPUs reclaimed) took to exit: 0
    when it exited at once on SIGTERM, 1 when it was killed at the end of it. Read off the platform's most recent
    evictions (how long a job's pods take to stop is its code's, and the platform's nodes'); with fewer than
    `MIN_STOPS` measured, a stop may end anywhere in the grace period, evenly."""

    def __init__(self, fractions=()):
        self.fractions = sorted(min(max(float(value), 0.0), 1.0) for value in fractions)

    @classmethod
    def fitted(cls, fractions) -> "StopTimes":
        fractions = list(fractions)
        return cls(fractions) if len(fractions) >= MIN_STOPS else cls()

    def quantile(self, level: float) -> float:
        """The `level`-quantile of the fraction; level 1 (the latest start) is the whole grace period."""
        if level >= 1.0:
            return 1.0
        if not self.fractions:
            return level
        return self.fractions[quantile_index(level, len(self.fractions))]


class Holding(NamedTuple):
    """A job of the team holding GPUs in a pool now (`JobQuerySet.in_use`), since `started_at`. A named tuple, as
    `Waiting`: thousands are made to quote every queue; a frozen dataclass took two to three times as long to make."""

    pool_id: int
    gpus: int
    started_at: datetime
    max_run_seconds: int
    priority: int = 0
    grace_seconds: int = 0  # its pods' time to stop when preempted (the platform's cap applied)


class Waiting(NamedTuple):
    """A job of the team not admitted yet, in Kueue's order; `pools`: where it may be admitted (home first, then
    the spill pools of a soft job). `job_id` None: the job of the submit preview."""

    job_id: int | None
    gpus: int
    max_run_seconds: int
    pools: tuple[int, ...]
    priority: int = 0
    grace_seconds: int = 0
    submitted_at: datetime | None = None  # None: not submitted yet (the preview's, or one foreseen or requeued)
    # GPUs of each of its pods, one per node; 0: one pod of `gpus` (a job requeued in the replay: its shape unknown).
    per_node: int = 0

    def fits_a_free_node(self, free_blocks: dict[int, int], pool_id: int) -> bool:
        """Whether its pods run at once on the free GPUs `free_blocks` says a node of `pool_id` has now: one pod that
        fits the largest free block. A job on several nodes needs several such blocks, which one number does not
        tell: never at once."""
        if self.per_node and self.per_node < self.gpus:
            return False
        return free_blocks.get(pool_id, 0) >= self.gpus


@dataclass
class TeamQueue:
    """Everything the quote of one team's queue reads (built by `jobs.quote_selectors`)."""

    team_id: int
    best_effort: bool
    room: dict[int, int]  # pool id -> GPUs the team can still be admitted on there now (`quota_room`)
    holding: list[Holding]
    waiting: list[Waiting]
    history: RunHistory
    ceiling: dict[int, int] = field(default_factory=dict)  # pool id -> `pools.lending.most_available_to` there
    reclaim: dict[int, tuple[int, int]] = field(default_factory=dict)  # pool id -> (GPUs lent out, seconds to return)
    pool_names: dict[int, str] = field(default_factory=dict)
    delay: StartDelay = field(default_factory=StartDelay)
    stops: StopTimes = field(default_factory=StopTimes)
    # pool id -> the most GPUs free on one of its nodes now (`pools.occupancy`): a job Kueue admits now by preemption
    # or on reclaimed GPUs starts on them at once, while the stopped pods still exit (Kueue gives their quota back
    # once they are stopping).
    free_blocks: dict[int, int] = field(default_factory=dict)
    reserved: dict[int, int] = field(default_factory=dict)  # pool id -> GPUs of the team's reservation there now
    # What the team will likely submit next (`arrivals`): its recent submissions again, as far ahead as they go back,
    # several times over.
    arrivals: list[tuple[datetime, Waiting]] = field(default_factory=list)


@dataclass
class Quote:
    """When one job starts: `estimate` within [`low`, `high`] (80 %), `latest` if every job runs to its maximum; all
    None when it cannot start with the team's quota, when Kueue has admitted it but the scheduler finds no node for
    its pods (`unplaced`), or when it waits for GPUs other teams borrow in its pools' cohorts (`waits_for_others`, or
    behind a job that does): no time is known for those. `basis` says why, as items `jobs.quote_words.basis_in_words`
    words."""

    starts_now: bool
    estimate: datetime | None
    low: datetime | None
    high: datetime | None
    latest: datetime | None = None
    pool_id: int | None = None
    basis: list[dict] = field(default_factory=list)
    unplaced: bool = False
    waits_for_others: bool = False
    # Kueue admits it at once at every level (in `pool_id`): "starts now" when its pods then run within a minute too.
    admitted_now: bool = False

    @property
    def never(self) -> bool:
        return self.estimate is None and not self.unplaced and not self.waits_for_others

    def sooner_than(self, other: "Quote", *, by: timedelta) -> bool:
        """Starts meaningfully sooner than `other`: its estimate at least `by` earlier (or `other` never starts)."""
        if self.estimate is None:
            return False
        return other.estimate is None or self.estimate <= other.estimate - by


@dataclass
class _Run:
    """One replay at one quantile level: when each waiting job starts, in which pool, and what freed the room."""

    starts: dict[int, tuple[datetime, int]] = field(default_factory=dict)  # index in `waiting` -> (time, pool)
    admitted: dict[int, datetime] = field(default_factory=dict)  # index -> when Kueue admits it (its start - delay)
    freed_by_running: dict[int, int] = field(default_factory=dict)  # index -> GPUs running jobs gave back before it
    reclaimed: dict[int, int] = field(default_factory=dict)  # index -> GPUs reclaimed before it
    preempted: dict[int, tuple[int, int]] = field(default_factory=dict)  # index -> (jobs, GPUs) it stops to start
    capacity: dict[int, int] = field(default_factory=dict)  # pool id -> the most GPUs the team can ever hold there


@dataclass(slots=True)
class _Held:
    """GPUs the team holds in a pool during a replay: a job running now or one admitted on the way."""

    pool_id: int
    gpus: int
    priority: int
    since: datetime
    max_run_seconds: int
    kind: str  # "running" (now) or "admitted" (on the way)
    grace_seconds: int = 0


def _preempt(queue: TeamQueue, job: Waiting, pool_id: int, *, free: dict, held: dict) -> list[int] | None:
    """Kueue's preemption within the team (`withinClusterQueue: LowerPriority`, never to borrow): the held jobs of
    lower priority in `pool_id` to stop, lowest priority first and the most recently started first, so that `job`
    fits there within the team's reservation; None when it cannot."""
    used = sum(each.gpus for each in held.values() if each.pool_id == pool_id)
    lower = sorted(
        (key for key, each in held.items() if each.pool_id == pool_id and each.priority < job.priority),
        key=lambda key: (held[key].priority, -held[key].since.timestamp()),
    )
    if not lower or used - sum(held[key].gpus for key in lower) + job.gpus > queue.reserved.get(pool_id, 0):
        return None
    chosen, stopped = [], 0
    for key in lower:
        if free.get(pool_id, 0) + stopped >= job.gpus and used - stopped + job.gpus <= queue.reserved.get(pool_id, 0):
            break
        chosen.append(key)
        stopped += held[key].gpus
    return chosen


def _reclaim_at_once(job: Waiting, *, free: dict, reclaims: dict, free_blocks: dict) -> tuple[int, int] | None:
    """Kueue reclaims a lender's GPUs by stopping the borrowers' jobs and admits the lender's job at once (their quota
    comes back once they are stopping): it runs at once when a node of the pool has its GPUs free now, while the
    borrowers' pods still stop. The pool and the GPUs it takes back (out of `reclaims`, into `free`), or None."""
    for pool_id in job.pools:
        lent = sum(gpus for each, gpus in reclaims.values() if each == pool_id)
        if not job.fits_a_free_node(free_blocks, pool_id) or free.get(pool_id, 0) + lent < job.gpus:
            continue
        needed = taken = job.gpus - free.get(pool_id, 0)
        for key, (each, gpus) in list(reclaims.items()):
            if each != pool_id or not needed:
                continue
            take = min(gpus, needed)
            needed -= take
            if take == gpus:
                del reclaims[key]  # its event is skipped as stale
            else:
                reclaims[key] = (each, gpus - take)
        free[pool_id] = free.get(pool_id, 0) + taken
        return pool_id, taken
    return None


def arrivals(
    submissions: list[tuple[datetime, Waiting]], *, now: datetime, count: int, repeats: int = ARRIVAL_REPEATS
) -> list[tuple[datetime, Waiting]]:
    """The submissions a team will likely make next: its `count` most recent ones before `now` again, each as far
    after now as it was before, and again `repeats` times over (the next stretches of time look like the last one).
    Jobs of a higher priority among them pass its queued jobs in Kueue's order; the others queue behind them."""
    recent = sorted((pair for pair in submissions if pair[0] <= now), key=lambda pair: pair[0])
    recent = recent[-count:] if count else []
    if not recent:
        return []
    span = now - recent[0][0]
    stretches = repeats if span > timedelta(0) else 1
    # Each stretch lies after the one before it (within [now + k·span, now + (k+1)·span]): sorting the first is
    # enough.
    mirrored = sorted(((now + (now - at), job) for at, job in recent), key=itemgetter(0))
    offsets = [stretch * span for stretch in range(stretches)]
    return [(at + offset, job) for offset in offsets for at, job in mirrored]


def _running(queue: TeamQueue, *, now: datetime) -> list[tuple[_Held, float]]:
    """The team's jobs holding GPUs now, as the replay holds them, each with the fraction of its maximum run time
    it has run (the same at every level: worked out once per queue)."""
    running = []
    for holding in queue.holding:
        elapsed = max((now - holding.started_at).total_seconds(), 0.0)
        max_run = max(holding.max_run_seconds, 1)
        each = _Held(
            holding.pool_id,
            holding.gpus,
            holding.priority,
            holding.started_at,
            max_run,
            "running",
            holding.grace_seconds,
        )
        running.append((each, min(elapsed / max_run, 1.0)))
    return running


def _replay(queue: TeamQueue, *, level: float, now: datetime, running: list[tuple[_Held, float]]) -> _Run:
    free = dict(queue.room)
    held: dict[int, _Held] = {}
    reclaims: dict[int, tuple[int, int]] = {}  # key -> (pool, GPUs)
    coming: dict[int, Waiting] = {}  # key -> a job the team will likely submit then
    events: list[tuple[datetime, int]] = []  # (time, key of `held`, `reclaims` or `coming`); stale keys are skipped
    keys = iter(range(1 << 62))
    for each, after in running:
        fraction = queue.history.quantile(level, after=after)
        end = max(each.since + timedelta(seconds=fraction * each.max_run_seconds), now)
        key = next(keys)
        held[key] = each  # never changed by the replay: shared by every level's
        events.append((end, key))
    for pool_id, (gpus, seconds) in queue.reclaim.items():
        if gpus:
            key = next(keys)
            reclaims[key] = (pool_id, gpus)
            # A stopped pod ends between at once (it exits on SIGTERM) and its grace period (`StopTimes`).
            events.append((now + timedelta(seconds=queue.stops.quantile(level) * seconds), key))
    # Level 1 is the latest start the jobs there now can cause: it foresees no submission. In a StrictFIFO queue a
    # submission of no higher priority than every waiting job stays behind them all: it changes no start.
    lowest = min((job.priority for job in queue.waiting), default=0)
    for at, job in queue.arrivals if level < LATEST else ():
        if not queue.best_effort and job.priority <= lowest:
            continue
        key = next(keys)
        coming[key] = job
        events.append((at, key))
    heapq.heapify(events)
    # A job larger than all its team could ever hold in its pools (`ceiling`) waits for ever: it blocks nobody (Kueue
    # sets it aside as inadmissible). One within it may wait for other teams' borrowed GPUs, which the replay does
    # not see return: it gets no time (`Quote.waits_for_others`).
    capacity = dict(queue.room)
    for pool_id, gpus in [*((each.pool_id, each.gpus) for each in held.values()), *reclaims.values()]:
        capacity[pool_id] = capacity.get(pool_id, 0) + gpus
    for pool_id, gpus in queue.ceiling.items():
        capacity[pool_id] = max(capacity.get(pool_id, 0), gpus)
    run = _Run(capacity=capacity)
    # Kueue's order: priority, then submission (the order of `waiting`); a preempted job is requeued behind the jobs of
    # its priority already queued.
    left: list[tuple[tuple[int, int], int | None, Waiting]] = [
        ((-job.priority, index), index, job)
        for index, job in enumerate(queue.waiting)
        if any(capacity.get(pool_id, 0) >= job.gpus for pool_id in job.pools)
    ]
    left.sort(key=lambda entry: entry[0])
    sequence = len(queue.waiting)  # the order of a job requeued or submitted during the replay: after those there
    # Preemption within the team needs a reservation and two priorities among its jobs.
    can_preempt = (
        bool(queue.reserved)
        and len(
            {job.priority for job in queue.waiting}
            | {each.priority for each in held.values()}
            | {j.priority for j in coming.values()}
        )
        > 1
    )
    freed = reclaimed = 0
    free_blocks = dict(queue.free_blocks)  # what jobs admitted now take of the nodes' free GPUs
    moment = now
    run_fraction = queue.history.quantile(level)
    delay = timedelta(seconds=queue.delay.quantile(level))
    # A start that stops others first (preemption, or a reclaim at once) takes Kueue a cycle more, and longer the
    # more jobs it stops (`StartDelay`); a reclaim's number of jobs is not known here.
    stopping_delays = {
        count: timedelta(seconds=queue.delay.quantile(level, stopping=count))
        for count in (STOPPING_ANY, *range(1, STOPPING_GROUPS + 1))
    }
    while left:
        still, reorder = [], False
        for position, (order, index, job) in enumerate(left):
            pool, stopped = next((p for p in job.pools if free.get(p, 0) >= job.gpus), None), []
            stops_others = False
            if pool is None and moment == now:
                at_once = _reclaim_at_once(job, free=free, reclaims=reclaims, free_blocks=free_blocks)
                if at_once is not None:
                    pool, taken = at_once
                    reclaimed += taken
                    stops_others = True
            for candidate in job.pools if pool is None and can_preempt else ():
                chosen = _preempt(queue, job, candidate, free=free, held=held)
                if chosen is not None:
                    pool, stopped, stops_others = candidate, chosen, bool(chosen)
                    break
            if pool is None:
                if not queue.best_effort:  # StrictFIFO: nobody passes a waiting head
                    still.extend(left[position:])
                    break
                still.append((order, index, job))
                continue
            # Stopped pods exit between at once and their grace period (`StopTimes`, of the longest); a job admitted
            # now that fits on a node's free GPUs does not wait for them.
            longest = max((held[key].grace_seconds for key in stopped), default=0)
            if index is not None and stopped:
                run.preempted[index] = (len(stopped), sum(held[key].gpus for key in stopped))
            stopping = timedelta(seconds=queue.stops.quantile(level) * longest)
            if moment == now and job.fits_a_free_node(free_blocks, pool):
                stopping = timedelta(0)
            if moment == now:
                free_blocks[pool] = max(free_blocks.get(pool, 0) - job.gpus, 0)
            for key in stopped:
                victim = held.pop(key)
                free[pool] += victim.gpus
                sequence += 1
                again = Waiting(
                    None, victim.gpus, victim.max_run_seconds, (pool,), victim.priority, victim.grace_seconds
                )
                still.append(((-victim.priority, sequence), None, again))  # to run again from its start
                reorder = True
            free[pool] -= job.gpus
            path = stopping_delays[min(len(stopped), STOPPING_GROUPS) or STOPPING_ANY] if stops_others else delay
            if moment + stopping <= now and job.submitted_at is not None:
                # Submitted already, and admissible now: its path (the delay) began at its submission.
                start = max(job.submitted_at + path, now)
            else:
                start = moment + stopping + path
            if index is not None:
                run.starts[index], run.admitted[index] = (start, pool), moment
                run.freed_by_running[index], run.reclaimed[index] = freed, reclaimed
            # Its GPUs are Kueue's from its admission; its run (and so its end) counts from its start.
            end = start + timedelta(seconds=run_fraction * job.max_run_seconds)
            key = next(keys)
            held[key] = _Held(pool, job.gpus, job.priority, moment, job.max_run_seconds, "admitted", job.grace_seconds)
            heapq.heappush(events, (end, key))
        left = still
        while events and events[0][1] not in held and events[0][1] not in reclaims and events[0][1] not in coming:
            heapq.heappop(events)  # a job preempted in the replay: its end no longer frees anything
        # Done once every job of the queue has started (the others were only there to take room before them).
        if not any(index is not None for _order, index, _job in left) or not events:
            break
        moment = events[0][0]
        while events and events[0][0] == moment:
            _at, key = heapq.heappop(events)
            if key in coming:
                sequence += 1
                job = coming.pop(key)
                if any(capacity.get(pool_id, 0) >= job.gpus for pool_id in job.pools):
                    left.append(((-job.priority, sequence), None, job))
                    reorder = True
            elif key in held:
                each = held.pop(key)
                free[each.pool_id] = free.get(each.pool_id, 0) + each.gpus
                freed += each.gpus if each.kind == "running" else 0
            elif key in reclaims:
                pool_id, gpus = reclaims.pop(key)
                free[pool_id] = free.get(pool_id, 0) + gpus
                reclaimed += gpus
        if reorder:
            left.sort(key=lambda entry: entry[0])
    return run


def quote_queue(queue: TeamQueue, *, now: datetime | None = None) -> dict[int | None, Quote]:
    """A `Quote` for every waiting job of `queue`, by job id (None: the preview's job)."""
    now = now or timezone.now()
    running = _running(queue, now=now)
    runs = {level: _replay(queue, level=level, now=now, running=running) for level in (LOW, ESTIMATE, HIGH, LATEST)}
    quotes: dict[int | None, Quote] = {}
    for index, job in enumerate(queue.waiting):
        quotes[job.job_id] = _quote_one(queue, index, job, runs, now=now)
    return quotes


def _quote_one(queue: TeamQueue, index: int, job: Waiting, runs: dict[float, _Run], *, now: datetime) -> Quote:
    home = job.pools[0]
    ahead = queue.waiting[:index]
    basis: list[dict] = []
    if ahead:
        basis.append({"say": "ahead", "jobs": len(ahead), "gpus": sum(other.gpus for other in ahead)})
    if index not in runs[LATEST].starts:
        if any(runs[LATEST].capacity.get(pool_id, 0) >= job.gpus for pool_id in job.pools):  # others' GPUs to wait
            basis.append({"say": "others", "pool": queue.pool_names.get(home, "")})
            return Quote(starts_now=False, estimate=None, low=None, high=None, basis=basis, waits_for_others=True)
        basis.append({"say": "never", "gpus": job.gpus, "pool": queue.pool_names.get(home, "")})
        return Quote(starts_now=False, estimate=None, low=None, high=None, basis=basis)
    times = sorted(runs[level].starts.get(index, runs[LATEST].starts[index])[0] for level in (LOW, ESTIMATE, HIGH))
    low, estimate, high = times
    latest, pool_id = runs[LATEST].starts[index]
    latest = max(latest, high)
    # Kueue admits it at once at every level (its pods then take the path's delay to run, and, when it stops other
    # jobs and no node has its GPUs free now, the stopped pods' time to exit). It "starts now" when it is Running
    # within `STARTS_NOW_WITHIN` at level 0.9 too; a start further off (long grace periods to wait out) is quoted as
    # any other, with the same basis.
    admitted_now = all(runs[level].admitted.get(index, latest) <= now for level in (LOW, ESTIMATE, HIGH))
    starts_now = admitted_now and high <= now + STARTS_NOW_WITHIN
    unmeasured = starts_now and not queue.delay.measured
    if unmeasured:
        # No start measured on the platform yet: how long its path takes (an image pull may take a minute) is not
        # known, and "starts now" promises no more than Running within `STARTS_NOW_WITHIN`. The interval is that
        # promise, not the instant now (which no real start falls on).
        high = max(high, now + STARTS_NOW_WITHIN)
        latest = max(latest, high)
    if admitted_now:
        room = queue.room.get(pool_id, 0)
        if room < job.gpus and runs[ESTIMATE].reclaimed.get(index):
            # Its room is lent out: Kueue reclaims it and the job runs on a node's free GPUs meanwhile.
            seconds = queue.reclaim.get(pool_id, (0, 0))[1]
            basis.append({"say": "reclaim", "gpus": runs[ESTIMATE].reclaimed[index], "seconds": seconds})
        elif index in runs[ESTIMATE].preempted:
            # No room: Kueue stops lower-priority jobs of the team for it.
            jobs, gpus = runs[ESTIMATE].preempted[index]
            basis.append({"say": "preempts", "jobs": jobs, "gpus": gpus})
        else:
            basis.append({"say": "room", "gpus": room, "pool": queue.pool_names.get(pool_id, "")})
    else:
        freed = runs[LATEST].freed_by_running.get(index, 0)
        if freed:
            basis.append({"say": "freed", "gpus": freed, "latest": latest.isoformat()})
        reclaimed = runs[LATEST].reclaimed.get(index, 0)
        if reclaimed:
            seconds = max(queue.reclaim.get(pool_id, (0, 0))[1] for pool_id in job.pools)
            basis.append({"say": "reclaim", "gpus": reclaimed, "seconds": seconds})
        basis.append({"say": "history", "jobs": queue.history.size})
    if unmeasured:
        basis.append({"say": "unmeasured", "seconds": int(STARTS_NOW_WITHIN.total_seconds())})
    if pool_id != home:
        basis.append({"say": "spills", "pool": queue.pool_names.get(pool_id, "")})
    return Quote(starts_now, estimate, low, high, latest, pool_id, basis, admitted_now=admitted_now)
