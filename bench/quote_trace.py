"""The calibration replay's traces and its scoring (bench/quote_replay.py): pure functions, no cluster, no database.

Three traces, each a seeded list of jobs with the moment they are submitted, their size, priority and placement,
their maximum run time and how long they really run (always less: people's jobs end early by varying amounts):

- ``steady``: three teams, each offering `STEADY_LOAD` of its reservation, at uniformly random moments;
- ``burst``: team A offers twice its reservation over the first 70 % of the window (half of its jobs soft, so they
  may spill to the elastic pool) and borrows team B's idle reservation; team B is near idle, then from 40 % of the
  window on offers 80 % of its reservation: Kueue reclaims what A borrowed (preempting A's borrowing jobs);
- ``priority``: team A offers 120 % of its reservation (no borrowing), its jobs low, normal and high priority
  (60/30/10 %): a high job that does not fit preempts a lower one of its team; team B works steadily beside it.

When Kueue stops a job (preempted, or its borrowed GPUs reclaimed), its pods exit at once (three in five) or after
checkpointing for 30 to 100 % of their 30 s grace period (`stop_seconds`).

Time is compressed by making maximum run times one to three minutes; the window follows from the number of jobs and
the load the trace offers (`window_seconds`). A warm-up history (`warm_up_history`) is drawn from the same
distribution of run fractions with another seed: finished jobs the benchmark writes before the trace starts, apart
from the scored ones, so the first quotes are fitted on a history the trace never sees.

Scoring (`score`) compares each job's quote at submit with its real start (when the portal first saw it Running,
`Job.running_seen_at` on its own clock, the moment its pages, API and mail say so; the sync's lag behind a watch on
the cluster, `observed`, is reported beside as `sync_lag_s`): the 80 % interval's
coverage with its exact binomial 95 % confidence interval (Clopper-Pearson), the interval's median width, the share
of jobs quoted "starts now" that were Running within 60 s, and the median absolute error of the estimate beside that
of the baseline Kueue's maintainers suggest for an ETA (KEP-168-2: the position in the queue × the queue's recent
mean time between admissions, `baseline_start`).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field

TRACES = ("steady", "burst", "priority")
GPUS_PER_NODE = 8
SIZES = ((1, 45), (2, 35), (4, 20))  # GPUs per job and weight
MAX_RUN_MINUTES = ((1, 60), (2, 30), (3, 10))  # maximum run time and weight: time compressed to minutes
PRIORITY_MIX = ((0, 60), (50, 30), (100, 10))  # Priority.LOW / NORMAL / HIGH and weight (the priority trace)
NORMAL = 50
STEADY_LOAD = 0.7
COVERAGE_TARGET = (0.75, 0.90)
STARTS_NOW_WITHIN_S = 60.0
STARTS_NOW_TARGET = 0.95
ERROR_RATIO_TARGET = 0.5
BASELINE_ADMISSIONS = 20  # the team's most recent admissions the baseline's mean time between them is taken over
CLOCK_PRECISION_S = 1.0  # cluster times (a pod's start) have second precision
GRACE_SECONDS = 30  # the jobs' grace period when stopped (Kubernetes' default, the portal's too)


# === How long people's jobs run ====================================================================================


def run_fraction(chooser: random.Random) -> float:
    """The fraction of its maximum run time a job really runs: one in ten fails or is stopped early, a quarter run
    nearly to their maximum, the rest end somewhere in between (mean ≈ 0.6)."""
    kind = chooser.random()
    if kind < 0.10:
        return chooser.uniform(0.02, 0.15)
    if kind < 0.35:
        return chooser.uniform(0.85, 0.95)
    return chooser.triangular(0.15, 0.95, 0.6)


def stop_seconds(chooser: random.Random) -> int:
    """How long a job's pods take to exit when Kueue stops them (SIGTERM, then SIGKILL after the grace period, 30 s
    by default): most exit at once (no handler), two in five checkpoint for 30 to 100 % of the grace period."""
    if chooser.random() < 0.6:
        return 0
    return round(chooser.uniform(0.3, 1.0) * GRACE_SECONDS)


def _weighted(chooser: random.Random, table) -> int:
    return chooser.choices([value for value, _ in table], [weight for _, weight in table])[0]


def _mean(table) -> float:
    return sum(value * weight for value, weight in table) / sum(weight for _, weight in table)


MEAN_RUN_FRACTION = 0.1 * 0.085 + 0.25 * 0.90 + 0.65 * (0.15 + 0.95 + 0.6) / 3
MEAN_GPU_SECONDS = _mean(SIZES) * _mean(MAX_RUN_MINUTES) * 60 * MEAN_RUN_FRACTION


# === The traces ====================================================================================================


@dataclass(frozen=True)
class TeamShape:
    """A team of a trace: its reservation in the reserved pool (a share of it), its quota there (a multiple of the
    reservation: above 1 it may borrow), its quota in the elastic pool, whether its reservation lends its idle GPUs,
    and its phases: (start, end as fractions of the window, GPU load offered as a multiple of its reservation)."""

    name: str
    share: float
    quota_factor: float
    elastic_quota: int
    lends: bool
    phases: tuple[tuple[float, float, float], ...]
    soft_share: float = 0.0
    priorities: tuple[tuple[int, int], ...] = ((NORMAL, 1),)


SHAPES: dict[str, tuple[TeamShape, ...]] = {
    "steady": (
        TeamShape("a", 0.5, 1.0, 0, False, ((0.0, 1.0, STEADY_LOAD),)),
        TeamShape("b", 0.25, 1.0, 0, False, ((0.0, 1.0, STEADY_LOAD),)),
        TeamShape("c", 0.25, 1.0, 0, False, ((0.0, 1.0, STEADY_LOAD),)),
    ),
    "burst": (
        TeamShape("a", 0.5, 2.0, 2 * GPUS_PER_NODE, True, ((0.0, 0.7, 2.0), (0.7, 1.0, 0.3)), soft_share=0.5),
        TeamShape("b", 0.5, 1.0, 0, True, ((0.0, 0.4, 0.1), (0.4, 1.0, 0.8))),
    ),
    "priority": (
        TeamShape("a", 0.5, 1.0, 0, False, ((0.0, 1.0, 1.2),), priorities=PRIORITY_MIX),
        TeamShape("b", 0.5, 1.0, 0, False, ((0.0, 1.0, 0.5),)),
    ),
}


@dataclass(frozen=True)
class TraceJob:
    index: int
    team: int  # index into the trace's teams
    at: float  # seconds after the trace's start
    gpus: int
    max_run_minutes: int
    run_seconds: int  # what it really runs (KWOK's delay): less than its maximum
    soft: bool
    priority: int
    stop_seconds: int = 0  # how long its pods take to exit when stopped (preempted): within the grace period


def reservations(shape: tuple[TeamShape, ...], reserved_gpus: int) -> list[int]:
    """Each team's reservation: its share of the reserved pool, the rounding remainder to the first team."""
    gpus = [int(reserved_gpus * team.share) for team in shape]
    gpus[0] += reserved_gpus - sum(gpus)
    return gpus


def window_seconds(kind: str, jobs: int, reserved_gpus: int, run_scale: float = 1.0) -> float:
    """The trace's window: as long as `jobs` jobs of the mean size take to offer the trace's GPU load."""
    shape = SHAPES[kind]
    offered_per_second = sum(
        load * gpus * (end - start)
        for team, gpus in zip(shape, reservations(shape, reserved_gpus), strict=True)
        for start, end, load in team.phases
    )
    return jobs * MEAN_GPU_SECONDS * run_scale / offered_per_second


def make_trace(kind: str, jobs: int, reserved_gpus: int, seed: int, run_scale: float = 1.0) -> list[TraceJob]:
    """`jobs` jobs of trace `kind` over its window, shared among the teams' phases in proportion to the GPU·s each
    offers, at uniformly random moments of its phase. `run_scale` < 1 shortens every real run (smoke runs): the
    maximum run time stays a whole minute, the runs (and the window) shrink."""
    shape = SHAPES[kind]
    window = window_seconds(kind, jobs, reserved_gpus, run_scale)
    chooser = random.Random(f"{kind}-{seed}")
    phases = [
        (team_index, start, end, load * gpus * (end - start))
        for team_index, (team, gpus) in enumerate(zip(shape, reservations(shape, reserved_gpus), strict=True))
        for start, end, load in team.phases
    ]
    total = sum(weight for *_rest, weight in phases)
    counts = [round(jobs * weight / total) for *_rest, weight in phases]
    counts[max(range(len(counts)), key=lambda i: phases[i][3])] += jobs - sum(counts)
    trace = []
    for (team_index, start, end, _weight), count in zip(phases, counts, strict=True):
        team = shape[team_index]
        for _ in range(count):
            max_run = _weighted(chooser, MAX_RUN_MINUTES)
            trace.append(
                TraceJob(
                    index=0,
                    team=team_index,
                    at=round(chooser.uniform(start, end) * window, 2),
                    gpus=_weighted(chooser, SIZES),
                    max_run_minutes=max_run,
                    run_seconds=max(1, round(run_fraction(chooser) * max_run * 60 * run_scale)),
                    soft=chooser.random() < team.soft_share,
                    priority=_weighted(chooser, team.priorities),
                    stop_seconds=stop_seconds(chooser),
                )
            )
    trace.sort(key=lambda job: (job.at, job.team))
    return [TraceJob(index, *list(asdict(job).values())[1:]) for index, job in enumerate(trace)]


def warm_up_history(kind: str, team: int, jobs: int, seed: int, run_scale: float = 1.0) -> list[tuple[int, int, float]]:
    """A team's warm-up history: `jobs` finished jobs (GPUs, maximum run minutes, seconds run) drawn from the same
    distribution as the trace's, with a seed of their own (never the scored jobs)."""
    chooser = random.Random(f"warm-up-{kind}-{team}-{seed}")
    history = []
    for _ in range(jobs):
        max_run = _weighted(chooser, MAX_RUN_MINUTES)
        history.append((_weighted(chooser, SIZES), max_run, run_fraction(chooser) * max_run * 60 * run_scale))
    return history


def trace_summary(trace: list[TraceJob], kind: str, reserved_gpus: int) -> dict:
    """What the trace offers: jobs and GPU·s per team, its window, its priorities and soft jobs."""
    shape = SHAPES[kind]
    window = max((job.at for job in trace), default=0.0)
    gpus = reservations(shape, reserved_gpus)
    teams = {}
    for index, team in enumerate(shape):
        own = [job for job in trace if job.team == index]
        gpu_seconds = sum(job.gpus * job.run_seconds for job in own)
        teams[team.name] = {
            "jobs": len(own),
            "reserved_gpus": gpus[index],
            "gpu_seconds": gpu_seconds,
            "load_over_reservation": round(gpu_seconds / (gpus[index] * window), 2) if window and gpus[index] else None,
        }
    levels = sorted({job.priority for job in trace})
    return {
        "jobs": len(trace),
        "window_seconds": round(window, 1),
        "teams": teams,
        "soft_jobs": sum(1 for job in trace if job.soft),
        "priorities": {str(level): sum(1 for job in trace if job.priority == level) for level in levels},
        "mean_run_over_max": round(sum(job.run_seconds / (job.max_run_minutes * 60) for job in trace) / len(trace), 3)
        if trace
        else None,
    }


# === The baseline ==================================================================================================


def mean_time_between(admissions: list[float]) -> float | None:
    """The mean time between the most recent `BASELINE_ADMISSIONS` admissions (epoch seconds); None for fewer than
    two."""
    recent = sorted(admissions)[-BASELINE_ADMISSIONS:]
    if len(recent) < 2:
        return None
    return (recent[-1] - recent[0]) / (len(recent) - 1)


def baseline_start(submitted: float, ahead: int, admissions: list[float]) -> float:
    """Kueue's maintainers' ETA (KEP-168-2): the jobs ahead in the team's queue (the visibility API's position) × the
    queue's recent mean time between admissions; with fewer than two admissions seen, no rate: now."""
    gap = mean_time_between(admissions)
    return submitted + ahead * (gap or 0.0)


# === Scoring =======================================================================================================


@dataclass
class Outcome:
    """One scored job: its quote at submit (epoch seconds; `never` when it could not start with its team's quota),
    the baseline's estimate, and its real start (None when it never started in the replay)."""

    submitted: float
    starts_now: bool
    never: bool
    estimate: float | None
    low: float | None
    high: float | None
    baseline: float
    started: float | None
    observed: float | None = None  # when a watch on the cluster saw its pod Running (the millisecond clock)
    seen: float | None = None  # when the portal first saw it Running (`Job.running_seen_at`, its own clock)
    extra: dict = field(default_factory=dict)

    @property
    def real_start(self) -> float | None:
        """The real start: when the portal first saw it Running, the moment its pages, API and mail say it runs
        (what a quote promises); else when a watch saw its pod Running; else from the portal's `started_at`, the
        pod's bind time, which the cluster truncates to the second (or the job's submission when that came later in
        the same second): the real start lay between it and the end of its second, the middle of that."""
        if self.seen is not None:
            return self.seen
        if self.observed is not None:
            return self.observed
        if self.started is None:
            return None
        end_of_second = math.floor(self.started / CLOCK_PRECISION_S) * CLOCK_PRECISION_S + CLOCK_PRECISION_S
        return (self.started + end_of_second) / 2

    def held(self) -> bool:
        """The 80 % interval holds the real start. A job that never started is a miss."""
        if self.real_start is None or self.low is None or self.high is None:
            return False
        return self.low <= self.real_start <= self.high


def _log_binomial_tail(k: int, n: int, p: float, upper: bool) -> float:
    """P[X >= k] (upper) or P[X <= k] for X ~ Binomial(n, p)."""
    terms = range(k, n + 1) if upper else range(0, k + 1)
    total = 0.0
    for i in terms:
        total += math.exp(
            math.lgamma(n + 1)
            - math.lgamma(i + 1)
            - math.lgamma(n - i + 1)
            + i * math.log(p)
            + (n - i) * math.log1p(-p)
        )
    return total


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """The exact (Clopper-Pearson) binomial confidence interval of a proportion; None for no trials."""
    if trials <= 0:
        return None
    alpha = 1 - confidence

    def solve(target, tail_k, upper) -> float:
        low, high = 0.0, 1.0
        for _ in range(60):  # bisection to ~1e-18
            middle = (low + high) / 2
            value = _log_binomial_tail(tail_k, trials, min(max(middle, 1e-300), 1 - 1e-16), upper)
            # the upper tail grows with p, the lower tail shrinks with p
            if (value < target) == upper:
                low = middle
            else:
                high = middle
        return (low + high) / 2

    lower = 0.0 if successes == 0 else solve(alpha / 2, successes, True)
    upper = 1.0 if successes == trials else solve(alpha / 2, successes, False)
    return lower, upper


def median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _r(value, digits: int = 1):
    return None if value is None else round(float(value), digits)


def _coverage(outcomes: list[Outcome]) -> float | None:
    return _r(sum(1 for o in outcomes if o.held()) / len(outcomes), 3) if outcomes else None


def score(outcomes: list[Outcome]) -> dict:
    """A trace's figures: coverage of the 80 % interval with its 95 % CI, the interval's median width, "starts now"
    within 60 s, the estimate's and the baseline's median absolute error (over the same jobs: those quoted a start
    that started), and whether each target is met."""
    quoted = [o for o in outcomes if not o.never]
    held = sum(1 for o in quoted if o.held())
    interval = clopper_pearson(held, len(quoted))
    coverage = held / len(quoted) if quoted else None
    started = [o for o in quoted if o.real_start is not None]
    errors = [abs(o.real_start - o.estimate) for o in started]
    baseline_errors = [abs(o.real_start - o.baseline) for o in started]
    now_jobs = [o for o in quoted if o.starts_now]
    now_in_time = sum(
        1 for o in now_jobs if o.real_start is not None and o.real_start - o.submitted <= STARTS_NOW_WITHIN_S
    )
    waits = [o.real_start - o.submitted for o in started]
    queued = [o for o in started if not o.starts_now]
    error, baseline_error = median(errors), median(baseline_errors)
    lags = sorted(o.seen - o.observed for o in started if o.seen is not None and o.observed is not None)
    ratio = error / baseline_error if error is not None and baseline_error else None
    now_share = now_in_time / len(now_jobs) if now_jobs else None
    return {
        "jobs": len(outcomes),
        "quoted": len(quoted),
        "cannot_start_quotes": len(outcomes) - len(quoted),
        "never_started": sum(1 for o in quoted if o.real_start is None),
        "coverage": _r(coverage, 3),
        "coverage_ci95": [round(bound, 3) for bound in interval] if interval else None,
        "median_width_s": _r(median([o.high - o.low for o in quoted])),
        "starts_now_jobs": len(now_jobs),
        "starts_now_running_within_60s": _r(now_share, 3),
        "median_abs_error_s": _r(error),
        "baseline_median_abs_error_s": _r(baseline_error),
        "error_ratio": _r(ratio, 3),
        # The same, over the jobs quoted to wait alone (on those quoted "starts now" both say "now").
        "queued_median_abs_error_s": _r(median([abs(o.real_start - o.estimate) for o in queued])),
        "queued_baseline_median_abs_error_s": _r(median([abs(o.real_start - o.baseline) for o in queued])),
        "wait_s": {"p50": _r(median(waits)), "max": _r(max(waits) if waits else None)},
        "queued_jobs": sum(1 for o in quoted if not o.starts_now),
        # The coverage over each kind apart: a "starts now" interval spans the path's sub-second delay, a queued one
        # the queue's seconds to minutes.
        "coverage_starts_now": _coverage([o for o in quoted if o.starts_now]),
        "coverage_queued": _coverage([o for o in quoted if not o.starts_now]),
        # How much later the portal saw a start than a watch on the cluster did (the sync's lag, in the real start).
        "sync_lag_s": {"p50": _r(median(lags), 3), "p90": _r(lags[int(0.9 * (len(lags) - 1))] if lags else None, 3)},
        "targets_met": {
            "coverage": coverage is not None and COVERAGE_TARGET[0] <= coverage <= COVERAGE_TARGET[1],
            "starts_now": now_share is None or now_share >= STARTS_NOW_TARGET,
            "error_vs_baseline": ratio is not None and ratio <= ERROR_RATIO_TARGET,
        },
    }
