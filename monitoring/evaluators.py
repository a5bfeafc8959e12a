"""What each kind of alert looks at: one function per kind reads the portal's rows (never Prometheus) and returns
an Observation per subject. A kind whose data is unknown right now (telemetry stale) returns None: its alerts are
then left as they are instead of being resolved for want of data."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils.translation import gettext_noop

from billing.budget import budget_statuses
from billing.models import DailyUsage
from billing.periods import month_of
from jobs.choices import JobState
from jobs.models import Job, Pod, Words
from pools.choices import PoolKind
from pools.lending import team_uses
from pools.models import Pool
from portal.models import Team

from .choices import AlertKind, Scope
from .models import GpuReading, TelemetryRun, UtilisationSample
from .rules import Observation
from .telemetry import latest_ok_run

WAITING_STATES = (JobState.QUEUED, JobState.ADMITTED, JobState.PENDING)


def _gpu_observations(kind: str, run: TelemetryRun | None, value_of) -> list[Observation] | None:
    if run is None:
        return None
    observations = []
    for reading in GpuReading.objects.filter(at__gte=run.at).select_related("pool"):
        value = value_of(reading)
        if value is None:
            continue
        gpu = {"gpu": reading.gpu, "node": reading.node_name}
        observations.append(
            Observation(
                kind,
                f"gpu:{reading.node_name}/{reading.gpu}",
                Words(gettext_noop("GPU %(gpu)s of %(node)s (%(pool)s)"), {**gpu, "pool": reading.pool.name})
                if reading.pool
                else Words(gettext_noop("GPU %(gpu)s of %(node)s"), gpu),
                float(value),
                pool_id=reading.pool_id,
                team_id=reading.team_id,
                job_id=reading.job_id,
            )
        )
    return observations


def _utilisation(kind: str, run: TelemetryRun | None) -> list[Observation] | None:
    if run is None:
        return None
    observations = []
    samples = UtilisationSample.objects.filter(
        at=run.at, scope__in=[Scope.POOL, Scope.TEAM], gpus__gt=0, util_avg__isnull=False
    )
    for sample in samples.select_related("pool", "team"):
        if sample.scope == Scope.POOL:
            observations.append(
                Observation(
                    kind,
                    f"pool:{sample.pool.slug}",
                    Words(gettext_noop("pool %(pool)s"), {"pool": sample.pool.name}),
                    sample.util_avg,
                    pool_id=sample.pool_id,
                )
            )
        else:
            observations.append(
                Observation(
                    kind,
                    f"team:{sample.team.slug}",
                    Words(gettext_noop("GPUs of team %(team)s"), {"team": sample.team.name}),
                    sample.util_avg,
                    team_id=sample.team_id,
                )  # fmt: skip
            )
    return observations


def _minutes(delta: timedelta) -> float:
    return round(delta.total_seconds() / 60, 2)


def queue_wait(now: datetime) -> list[Observation]:
    """How long each job not started yet has waited: since it last went to Queued (its submission, or its preemption:
    a job preempted a minute ago after running for hours has waited a minute)."""
    jobs = (
        Job.objects.filter(state__in=WAITING_STATES)
        .with_waiting_since()
        .values_list("pk", "name", "team_id", "pool_id", "waiting_since")
    )
    return [
        Observation(
            AlertKind.QUEUE_WAIT,
            f"job:{pk}",
            Words(gettext_noop("job %(name)s (#%(id)s)"), {"name": name, "id": pk}),
            _minutes(now - waiting_since),
            pool_id=pool_id,
            team_id=team_id,
            job_id=pk,
        )  # fmt: skip
        for pk, name, team_id, pool_id, waiting_since in jobs
    ]


def pod_pending(now: datetime) -> list[Observation]:
    pods = Pod.objects.filter(phase="Pending", scheduled=False).values_list(
        "namespace", "name", "team_id", "pool_id", "job_id", "created_at"
    )
    return [
        Observation(
            AlertKind.POD_PENDING,
            f"pod:{namespace}/{name}",
            Words(gettext_noop("pod %(pod)s"), {"pod": f"{namespace}/{name}"}),
            _minutes(now - created_at),
            pool_id=pool_id,
            team_id=team_id,
            job_id=job_id,
        )  # fmt: skip
        for namespace, name, team_id, pool_id, job_id, created_at in pods
    ]


def failure_rate(now: datetime) -> list[Observation]:
    since = now - timedelta(hours=settings.MONITORING_FAILURE_WINDOW_HOURS)
    rows = (
        Job.objects.filter(finished_at__gte=since, state__in=[JobState.SUCCEEDED, JobState.FAILED])
        .values("team_id", "team__slug", "team__name")
        .annotate(finished=Count("pk"), failed=Count("pk", filter=Q(state=JobState.FAILED)))
    )
    return [
        Observation(
            AlertKind.FAILURE_RATE,
            f"team:{row['team__slug']}",
            Words(gettext_noop("jobs of team %(team)s"), {"team": row["team__name"]}),
            round(100.0 * row["failed"] / row["finished"], 2),
            team_id=row["team_id"],
        )  # fmt: skip
        for row in rows
        if row["finished"]
    ]


def _month_figures(now: datetime) -> list[dict]:
    """Per team, the month's figures metered so far (`DailyUsageQuerySet.month_sums`, days up to today)."""
    return list(
        DailyUsage.objects.month_sums(month_of(now), by=("team_id", "team__slug", "team__name"), through=now.date())
    )


def spill_ratio(now: datetime) -> list[Observation]:
    observations = []
    for row in _month_figures(now):
        used = row["in_reservation"] + row["overage"] + row["spill"]
        if used > 0:
            observations.append(
                Observation(
                    AlertKind.SPILL_RATIO,
                    f"team:{row['team__slug']}",
                    Words(gettext_noop("team %(team)s"), {"team": row["team__name"]}),
                    round(float(100 * row["spill"] / used), 2),
                    team_id=row["team_id"],
                )  # fmt: skip
            )
    return observations


def reservation_wasted(now: datetime) -> list[Observation]:
    observations = []
    for row in _month_figures(now):
        if row["reserved"] > 0:
            observations.append(
                Observation(
                    AlertKind.RESERVATION_WASTED,
                    f"team:{row['team__slug']}",
                    Words(gettext_noop("reservation of team %(team)s"), {"team": row["team__name"]}),
                    round(float(100 * row["in_reservation"] / row["reserved"]), 2),
                    team_id=row["team_id"],
                    gate=row["spill"] > 0,
                )  # fmt: skip
            )
    return observations


def reservation_not_lent(now: datetime) -> list[Observation]:
    """Per team and reserved pool: GPUs of its reservations there that its own jobs leave idle and its lending setting
    keeps from other teams (lend none, or protected), while other teams' jobs wait in that pool (Queued: Kueue has not
    admitted them). The gate is the waiting; the value is the GPUs held back. A team that lends its idle GPUs holds
    back none, so its alert resolves at the next evaluation."""
    pools = {pool.pk: pool for pool in Pool.objects.filter(kind=PoolKind.RESERVED)}
    waiting: dict[int, dict[int, int]] = {}
    queued = (
        Job.objects.filter(state=JobState.QUEUED, pool__in=list(pools))
        .values("pool", "team")
        .annotate(gpus=Sum("total_gpus"))
        .values_list("pool", "team", "gpus")
    )
    for pool_id, team_id, gpus in queued:
        waiting.setdefault(pool_id, {})[team_id] = gpus
    teams = {pk: (slug, name) for pk, slug, name in Team.objects.values_list("pk", "slug", "name")}
    observations = []
    for pool_id, uses in team_uses(list(pools), now=now).items():
        for use in uses.values():
            if not use.reserved:
                continue
            idle = max(use.reserved - use.used, 0)
            others = sum(gpus for team_id, gpus in waiting.get(pool_id, {}).items() if team_id != use.team_id)
            slug, name = teams[use.team_id]
            observations.append(
                Observation(
                    AlertKind.RESERVATION_NOT_LENT,
                    f"reservation:{slug}/{pools[pool_id].slug}",
                    Words(
                        gettext_noop("reservation of team %(team)s in pool %(pool)s"),
                        {"team": name, "pool": pools[pool_id].name},
                    ),
                    float(idle - use.idle_lent),
                    pool_id=pool_id,
                    team_id=use.team_id,
                    gate=others > 0,
                )
            )
    return observations


def capacity_missing(now: datetime) -> list[Observation]:
    pools = Pool.objects.filter(kind=PoolKind.RESERVED, contracted_gpus__isnull=False).annotate(
        live=Sum("nodes__gpu_allocatable", filter=Q(nodes__ready=True, nodes__unschedulable=False))
    )
    return [
        Observation(
            AlertKind.CAPACITY_MISSING,
            f"pool:{pool.slug}",
            Words(gettext_noop("pool %(pool)s"), {"pool": pool.name}),
            float(max(0, pool.contracted_gpus - (pool.live or 0))),
            pool_id=pool.pk,
        )  # fmt: skip
        for pool in pools
    ]


def budget_used(now: datetime) -> list[Observation]:
    """Per team with a budget: the share of this month's cap its variable part (overage and spill) has spent
    (`billing.budget`). At 100 % the cluster holds its jobs that would spend more (reconcile/budget.py)."""
    statuses = budget_statuses(now=now)
    names = dict(Team.objects.filter(pk__in=statuses).values_list("pk", "name"))
    slugs = dict(Team.objects.filter(pk__in=statuses).values_list("pk", "slug"))
    return [
        Observation(
            AlertKind.BUDGET_USED,
            f"budget:{slugs[team_id]}",
            Words(gettext_noop("budget of team %(team)s"), {"team": names[team_id]}),
            float(status.used_percent),
            team_id=team_id,
        )
        for team_id, status in statuses.items()
    ]


def observe_all(now: datetime) -> dict[str, list[Observation] | None]:
    """Every kind's observations at `now` (None for a kind whose data is unknown)."""
    run = latest_ok_run(now)
    return {
        AlertKind.GPU_UTILISATION_LOW: _utilisation(AlertKind.GPU_UTILISATION_LOW, run),
        AlertKind.GPU_UTILISATION_HIGH: _utilisation(AlertKind.GPU_UTILISATION_HIGH, run),
        AlertKind.GPU_MEMORY_HIGH: _gpu_observations(
            AlertKind.GPU_MEMORY_HIGH, run, lambda reading: reading.memory_used_percent
        ),
        AlertKind.GPU_TEMPERATURE_HIGH: _gpu_observations(
            AlertKind.GPU_TEMPERATURE_HIGH, run, lambda reading: reading.temperature_c
        ),
        AlertKind.QUEUE_WAIT: queue_wait(now),
        AlertKind.POD_PENDING: pod_pending(now),
        AlertKind.FAILURE_RATE: failure_rate(now),
        AlertKind.SPILL_RATIO: spill_ratio(now),
        AlertKind.RESERVATION_WASTED: reservation_wasted(now),
        AlertKind.RESERVATION_NOT_LENT: reservation_not_lent(now),
        AlertKind.CAPACITY_MISSING: capacity_missing(now),
        AlertKind.BUDGET_USED: budget_used(now),
    }
