"""Benchmark of lending idle reserved GPUs: one synthetic day of three teams replayed twice on a local cluster,
lending off and lending on, side by side in one run (same seed, same trace).

What runs, each as it runs in production (the machinery of bench/admission.py, reused):
- a local control plane with Kueue (its own state directory) and KWOK nodes: a reserved pool of `--reserved-nodes`
  eight-GPU nodes (32 GPUs by default) and an elastic pool of `--elastic-nodes` that soft jobs may spill into;
- the portal's rows made through its services: three teams reserving 1/2, 1/4 and 1/4 of the reserved pool (16/8/8;
  no unreserved GPUs, so everything a team borrows is lent), each with a quota of the whole pool there (it may
  borrow up to the pool) and `--elastic-quota` GPUs in the elastic pool; the Kueue projection;
- `manage.py sync_cluster` and a Celery worker (queue `cluster`) as processes of their own; jobs submitted through
  `jobs.services.submit_job` at their time in the trace, each pod "running" its run time on KWOK
  (`pod-complete.stage.kwok.x-k8s.io/delay`).

The trace (``--trace shifts``, the default) follows seed 000: reservations about 30 % used while their teams queue
and spill; 30 % → 65 %+ once idle GPUs are shared. Three teams work in three shifts (time zones): team k's working
day is the k-th third of the compressed day (`--day-seconds`), its night the other two thirds. During its day a
team offers `--peak-factor` × its reservation of GPU load: jobs at uniformly random moments of its day until their
GPU·s reach factor × reservation × the day's length (that many GPUs busy on average, were there room); at night
`--night-load` × its reservation (near idle), the same way. Jobs are of 1, 2 or 4 GPUs (weights 40/35/25) and run
a sixth of a day × U(0.6, 1.0); `--soft-share` of them are soft (may spill into the elastic pool). Without lending
a team's own use is then about a third of its reservation (its day's share of the day), plus whatever of its day's
backlog it runs in its own night; with lending, a team's excess by day runs on the reservations of the two teams
at night: with the default factor 2 and reservations 16/8/8, at most the whole pool in team A's day and half of it
in B's and C's (≈ 67 % over the day, seed 000's 65 %+). The number of jobs follows from the load (`--jobs` is not
used). ``--trace uniform`` is the earlier trace: `--jobs` jobs shared among the teams in proportion to their
reservations, three quarters of a team's jobs in its third of the day and the rest at random in the other two
thirds, each running a third of a day × U(0.6, 1.0) (its baseline utilisation was 50–68 %).
The replays: first every reservation lends nothing (`pools.services.set_lending(lending="none")`), then every
reservation lends its idle GPUs (the default, `idle`); between them the cluster drains (every job of the first
replay finished).

Reports per replay (the last line printed is a JSON summary):
- ``utilisation``: the reserved pool's reserved GPUs in use by anyone over the day window [first submission, + one
  day), from the portal's own metering (`billing.metering.meter`, i.e. the UsageInterval rows the sync wrote):
  (Σ in_reservation + Σ lent) / Σ reserved; beside it the owners' own use alone, Σ in_reservation / Σ reserved
  (the U/R of the billing page) and each team's U/R. Work that runs after the window does not count: a backlog
  queued in team C's day (the last shift) that drains after it, or a job submitted late in the day (``trace``
  says how many GPU·s run past the day even if no job ever waited);
- ``queue_wait_s`` p50/p95: submit call → the job's first Running state written by the sync (a database trigger in
  the benchmark's own database notes the moment), over the jobs that ran; ``never_ran`` the others;
- ``spill_gpu_hours``: metered GPU-hours in the elastic pool over the replay window (first submission → last job
  finished);
- ``reclaim_s`` p50/p99: the jobs of a team submitted while other teams held GPUs above their reservations (so
  borrowed that team's lent GPUs; the pool has no unreserved GPUs) and that fit in the submitting team's
  reservation next to its own jobs then: submit → the job's pod Running (same mark as above);
- ``lender_pods_preempted_inside_reservation``: jobs whose preemption counter rose while, at the poll before
  (every second), they held no borrowed GPU (`jobs.selectors.borrowed_gpus`, the portal's reading of Kueue's
  order); ``preemptions`` all preemptions seen;
- ``lending``: Σ lent GPU-seconds (what the lenders are credited for) vs Σ borrowed GPU-seconds (what the borrowers
  are charged for, inside their overage) over the replay window, exact Decimals from `meter`; ``equal`` is their
  exact equality. After both replays, the month's charges (`billing.services.month_charges`, after
  `refresh_usage`): each lender's credit line vs its own lent GPU-hours × the pool's lending price (to the cent, as
  billing computes a line), Σ lending credit lines vs Σ borrowed GPU-hours × that price (lines are rounded one by
  one, so these two may differ by up to half a cent per line), and what the borrowers pay for those hours at the
  hourly price.

Targets (issue 12): utilisation +25 points or more (lending on − lending off), queue wait p95 halved, reclaim p99
< 60 s, 0 lender pods preempted inside their reservation, Σ lent = Σ borrowed exactly.

Usage: ``python bench/exchange.py [--peak-factor 2] [--day-seconds 150] [--seed 7] ...`` (``--help`` lists all).
Uses its own cluster state directory (.state/devcluster-bench-exchange) and database
(`<DATABASE_URL name>_exchangebench`, dropped and made afresh each run); REDIS_URL's database is purged of queued
tasks: give it one of its own. Stop its cluster, if left running with ``--keep``: ``python -c "from pathlib import
Path; from devcluster import launcher; launcher.Cluster(Path('.state/devcluster-bench-exchange')).down()"``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.admission import (  # noqa: E402 - after the path
    GPUS_PER_NODE,
    RESERVED_POOL,
    TRIGGERS,
    job_spec,
    make_bench_pools,
    marks,
    spread,
    start_cluster,
    wait_listed,
    wait_queues_active,
    wait_workers,
)

TARGETS = {
    "utilisation_gain_points": 25.0,
    "queue_wait_p95_ratio_at_most": 0.5,
    "reclaim_p99_s": 60.0,
    "lender_pods_preempted_inside_reservation": 0,
    "lent_equals_borrowed": True,
}
DEFAULT_STATE_NAME = "devcluster-bench-exchange"
SHARES = (0.5, 0.25, 0.25)  # reservations, as shares of the reserved pool
SIZES = ((1, 40), (2, 35), (4, 25))  # GPUs per job and weight


def log(message: str) -> None:
    print(f"[exchange {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _r(value, digits: int = 1):
    return None if value is None else round(float(value), digits)


# === The trace =====================================================================================================


@dataclass(frozen=True)
class TraceJob:
    index: int
    team: int
    at: float  # seconds after the replay's start
    gpus: int
    run_seconds: int
    soft: bool


def make_trace(jobs: int, day: float, soft_share: float, seed: int) -> list[TraceJob]:
    """The earlier trace (``--trace uniform``): `jobs` jobs, three quarters of a team's in its third of the day."""
    chooser = random.Random(seed)
    third = day / 3
    trace = []
    for index in range(jobs):
        team = chooser.choices(range(len(SHARES)), SHARES)[0]
        if chooser.random() < 0.75:
            at = team * third + chooser.uniform(0, third)
        else:  # off peak: one of the two other thirds
            other = chooser.choice([k for k in range(3) if k != team])
            at = other * third + chooser.uniform(0, third)
        trace.append(
            TraceJob(
                index=index,
                team=team,
                at=round(at, 2),
                gpus=chooser.choices([g for g, _ in SIZES], [w for _, w in SIZES])[0],
                run_seconds=max(5, round(third * chooser.uniform(0.6, 1.0))),
                soft=chooser.random() < soft_share,
            )
        )
    return sorted(trace, key=lambda job: (job.at, job.index))


RUN_SPAN = (0.6, 1.0)  # a job's run time, as a share of a sixth of the day


def make_shift_trace(
    reservations: list[int], day: float, peak_factor: float, night_load: float, soft_share: float, seed: int
) -> list[TraceJob]:
    """Seed 000's day (``--trace shifts``): team k works in the k-th third of the day. In each stretch of a team's
    day or night it submits jobs, at uniformly random moments of the stretch, until their GPU·s reach the stretch's
    load × its reservation × its length (`peak_factor` by day, `night_load` at night): the load is what the trace
    offers, the randomness is only in when, how big and how long."""
    chooser = random.Random(seed)
    third = day / 3
    run_base = day / 6
    trace = []
    for team, reserved in enumerate(reservations):
        for start, end, load in (
            (0.0, team * third, night_load),
            (team * third, (team + 1) * third, peak_factor),
            ((team + 1) * third, day, night_load),
        ):
            wanted = load * reserved * (end - start)
            offered = 0
            while offered < wanted:
                job = TraceJob(
                    index=0,
                    team=team,
                    at=round(chooser.uniform(start, end), 2),
                    gpus=chooser.choices([g for g, _ in SIZES], [w for _, w in SIZES])[0],
                    run_seconds=max(3, round(run_base * chooser.uniform(*RUN_SPAN))),
                    soft=chooser.random() < soft_share,
                )
                offered += job.gpus * job.run_seconds
                trace.append(job)
    trace.sort(key=lambda job: (job.at, job.team))
    return [TraceJob(index, j.team, j.at, j.gpus, j.run_seconds, j.soft) for index, j in enumerate(trace)]


def reservation_sizes(reserved_nodes: int) -> list[int]:
    """The teams' reservations: SHARES of the reserved pool, the rounding remainder to the first team."""
    contract = reserved_nodes * GPUS_PER_NODE
    gpus = [int(contract * share) for share in SHARES]
    gpus[0] += contract - sum(gpus)
    return gpus


def trace_summary(trace: list[TraceJob], day: float, reservations: list[int]) -> dict:
    """What the trace offers: GPU·s per team by its day and by its night, and what is submitted to run past the
    day (work that cannot count in the utilisation window, whatever the scheduling)."""
    third = day / 3
    teams = []
    for team, reserved in enumerate(reservations):
        jobs = [job for job in trace if job.team == team]
        by_day = sum(j.gpus * j.run_seconds for j in jobs if team * third <= j.at < (team + 1) * third)
        total = sum(j.gpus * j.run_seconds for j in jobs)
        teams.append(
            {
                "jobs": len(jobs),
                "reserved_gpus": reserved,
                "day_gpu_seconds": by_day,
                "night_gpu_seconds": total - by_day,
                "day_load_over_reservation": round(by_day / (reserved * third), 2) if reserved else None,
            }
        )
    past = sum(max(0.0, job.at + job.run_seconds - day) * job.gpus for job in trace)
    return {"teams": teams, "gpu_seconds_after_window_even_without_waiting": round(past, 1)}


# === The portal's rows =============================================================================================


def make_portal_rows(reserved_nodes: int, elastic_nodes: int, elastic_quota: int):
    from django.utils import timezone

    from pools import services as pool_services
    from portal.choices import Role
    from portal.models import Membership, Team, User

    contract = reserved_nodes * GPUS_PER_NODE
    elastic, reserved = make_bench_pools(reserved_nodes, elastic_nodes)
    gpus = reservation_sizes(reserved_nodes)
    now = timezone.now()
    teams = []
    for index, reserved_gpus in enumerate(gpus):
        user = User.objects.create(username=f"exchange-lead-{index}", password="!")  # noqa: S106
        team = Team.objects.create(slug=f"exchange-{'abc'[index]}", name=f"Exchange team {'ABC'[index]}")
        Membership.objects.create(user=user, team=team, role=Role.LEAD)
        pool_services.set_namespace_limits(
            team=team, max_pods=200, requests_cpu_millicores=128_000, requests_memory_mib=512 * 1024
        )
        reservation = pool_services.create_reservation(
            team=team,
            pool=reserved,
            gpus=reserved_gpus,
            starts_at=now - timedelta(days=1),
            ends_at=now + timedelta(days=30),
        )
        pool_services.set_quota(team=team, pool=reserved, max_gpus=contract)
        pool_services.set_quota(team=team, pool=elastic, max_gpus=elastic_quota)
        teams.append((team, user, reservation))
    return reserved, elastic, teams


def lending_limits() -> dict[str, object]:
    """The GPU lendingLimit of each team's ClusterQueue in the reserved flavor, as Kueue holds it."""
    from cluster import client
    from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION

    result = {}
    for item in client.custom_objects().list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")[
        "items"
    ]:
        name = item["metadata"]["name"]
        if not name.startswith("team-exchange-"):
            continue
        for group in item["spec"].get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                if RESERVED_POOL not in flavor.get("name", ""):
                    continue
                for resource in flavor.get("resources") or []:
                    if resource.get("name") == "nvidia.com/gpu":
                        result[name] = resource.get("lendingLimit")
    return result


def set_all_lending(teams, lending: str) -> dict:
    from pools import kueue as kueue_projection
    from pools import services as pool_services

    for _team, _user, reservation in teams:
        pool_services.set_lending(reservation=reservation, lending=lending)
    kueue_projection.reconcile()
    deadline = time.monotonic() + 120
    while True:
        limits = lending_limits()
        wanted = all((value in (None, 0, "0")) == (lending == "none") for value in limits.values())
        if (limits and wanted) or time.monotonic() > deadline:
            return limits
        time.sleep(1)


# === One replay ====================================================================================================


@dataclass
class Submitted:
    job: TraceJob
    started: float = 0.0
    job_id: int | None = None
    error: str = ""
    reclaim: bool = False


@dataclass
class Watch:
    """Every second: which jobs hold borrowed GPUs, and whose preemption counter rose."""

    reserved_pool_id: int
    stop: threading.Event = field(default_factory=threading.Event)
    borrowed: dict[int, int] = field(default_factory=dict)  # the last poll's job id -> borrowed GPUs
    held: dict[int, int] = field(default_factory=dict)  # the last poll's team id -> GPUs held in the reserved pool
    preemptions: dict[int, int] = field(default_factory=dict)
    preempted: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def poll(self) -> None:
        from jobs.models import Job
        from jobs.selectors import borrowed_gpus

        pools = [self.reserved_pool_id]
        borrowed = borrowed_gpus(list(Job.objects.in_use(pools=pools)))
        held = {team_id: gpus for (team_id, _pool), gpus in Job.objects.gpus_in_use(pools=pools).items()}
        counts = dict(Job.objects.filter(preemptions__gt=0).values_list("pk", "preemptions"))
        with self.lock:
            for job_id, count in counts.items():
                if count > self.preemptions.get(job_id, 0):
                    self.preempted.append({"job": job_id, "held_borrowed_gpus": self.borrowed.get(job_id, 0)})
            self.preemptions, self.borrowed, self.held = counts, borrowed, held

    def run(self) -> None:
        from django.db import connection

        try:
            while not self.stop.wait(1.0):
                try:
                    self.poll()
                except Exception as error:  # noqa: BLE001 - a missed poll is logged, the next one catches up
                    log(f"watch poll failed: {error}")
        finally:
            connection.close()


def replay(trace, teams, reserved, elastic, label: str, timeout: float) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from jobs import services
    from jobs.choices import FINAL_STATES
    from jobs.models import Job

    reservation_gpus = {team.pk: reservation.gpus for team, _user, reservation in teams}
    watch = Watch(reserved_pool_id=reserved.pk)
    watch.poll()
    watcher = threading.Thread(target=watch.run, daemon=True)
    watcher.start()
    submitted = [Submitted(job=job) for job in trace]
    t0 = time.time()

    def submit(item: Submitted) -> None:
        job = item.job
        team, user, _reservation = teams[job.team]
        delay = t0 + job.at - time.time()
        if delay > 0:
            time.sleep(delay)
        with watch.lock:
            others_borrow = any(
                held > reservation_gpus[team_id] for team_id, held in watch.held.items() if team_id != team.pk
            )
            fits = watch.held.get(team.pk, 0) + job.gpus <= reservation_gpus[team.pk]
        item.reclaim = others_borrow and fits
        spec = job_spec(f"{label}-{job.index:03d}", job.gpus, job.soft, job.run_seconds)
        item.started = time.time()
        try:
            item.job_id = services.submit_job(team=team, pool=reserved, user=user, spec=spec).pk
        except Exception as error:  # noqa: BLE001 - counted and reported
            item.error = f"{type(error).__name__}: {error}"[:300]
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=8) as executor:
        list(executor.map(submit, submitted))
    ids = [item.job_id for item in submitted if item.job_id is not None]
    log(f"{label}: {len(ids)} submitted ({len(submitted) - len(ids)} refused) in {time.time() - t0:.0f}s")
    deadline = t0 + timeout
    while time.time() < deadline:
        open_jobs = Job.objects.filter(pk__in=ids).exclude(state__in=FINAL_STATES).count()
        if not open_jobs:
            break
        time.sleep(3)
    t_end = time.time()
    watch.stop.set()
    watcher.join(timeout=10)
    watch.poll()  # a last look at the counters
    log(f"{label}: done after {t_end - t0:.0f}s ({open_jobs} jobs unfinished)")
    return {"t0": t0, "t_end": t_end, "submitted": submitted, "watch": watch, "unfinished": open_jobs}


def measure(run: dict, label: str, day: float, teams, reserved, elastic) -> dict:
    from django.utils import timezone

    from billing.metering import meter
    from jobs.models import Job

    running = marks().get("job_running", {})
    submitted = run["submitted"]
    waits = [running[str(s.job_id)] - s.started for s in submitted if s.job_id and str(s.job_id) in running]
    reclaims = [
        running[str(s.job_id)] - s.started for s in submitted if s.reclaim and s.job_id and str(s.job_id) in running
    ]
    reclaim_never = sum(1 for s in submitted if s.reclaim and s.job_id and str(s.job_id) not in running)
    now = timezone.now()
    start = datetime.fromtimestamp(run["t0"], tz=UTC)
    day_end = min(start + timedelta(seconds=day), now)
    end = min(datetime.fromtimestamp(run["t_end"], tz=UTC), now)
    day_rows = [row for row in meter(start=start, end=day_end, now=now) if row.pool_id == reserved.pk]
    rows = meter(start=start, end=end, now=now)
    reserved_s = sum((row.reserved for row in day_rows), Decimal(0))
    own_s = sum((row.in_reservation for row in day_rows), Decimal(0))
    lent_day_s = sum((row.lent for row in day_rows), Decimal(0))
    names = {team.pk: team.slug for team, _user, _reservation in teams}
    lent = sum((row.lent for row in rows if row.pool_id == reserved.pk), Decimal(0))
    borrowed = sum((row.borrowed for row in rows if row.pool_id == reserved.pk), Decimal(0))
    spill = sum((row.spill for row in rows if row.pool_id == elastic.pk), Decimal(0))
    preempted = run["watch"].preempted
    ids = [s.job_id for s in submitted if s.job_id]
    states: dict[str, int] = {}
    for state in Job.objects.filter(pk__in=ids).values_list("state", flat=True):
        states[state] = states.get(state, 0) + 1
    pools: dict[str, int] = {}
    for slug in Job.objects.filter(pk__in=ids).values_list("admitted_pool__slug", flat=True):
        pools[str(slug)] = pools.get(str(slug), 0) + 1
    return {
        "replay": label,
        "window_seconds": {
            "day": round((day_end - start).total_seconds(), 1),
            "replay": round(run["t_end"] - run["t0"], 1),
        },
        "jobs_submitted": len(ids),
        "jobs_refused": sum(1 for s in submitted if s.job_id is None),
        "final_states": states,
        "admitted_pools": pools,
        "utilisation": {
            "reserved_in_use_by_anyone": _r(100 * (own_s + lent_day_s) / reserved_s) if reserved_s else None,
            "owners_own_use_U_over_R": _r(100 * own_s / reserved_s) if reserved_s else None,
            "per_team_U_over_R": {
                names[row.team_id]: _r(100 * row.in_reservation / row.reserved) for row in day_rows if row.reserved
            },
            "reserved_gpu_hours": _r(reserved_s / 3600, 3),
        },
        "queue_wait_s": {**spread(waits, tail=0.95), "never_ran": len(ids) - len(waits)},
        "spill_gpu_hours": _r(spill / 3600, 4),
        "reclaim_s": {**spread(reclaims), "never_ran": reclaim_never},
        "preemptions": len(preempted),
        "lender_pods_preempted_inside_reservation": sum(1 for p in preempted if not p["held_borrowed_gpus"]),
        "lending": {
            "lent_gpu_seconds": str(lent),
            "borrowed_gpu_seconds": str(borrowed),
            "equal": lent == borrowed,
            "lent_gpu_hours": _r(lent / 3600, 4),
        },
    }


def money(reserved) -> dict:
    """The month's invoice figures after both replays: each lender's lending credit line vs its own lent GPU-hours
    at the lending price (to the cent, as the line is computed), and Σ credit lines vs the borrowed GPU-hours."""
    from django.utils import timezone

    from billing import services as billing_services
    from billing.choices import LineKind
    from billing.metering import meter
    from billing.money import hourly_cost
    from billing.periods import month_bounds

    now = timezone.now()
    billing_services.refresh_usage(now=now)
    month = now.date().replace(day=1)
    charges = billing_services.month_charges(month=month, now=now)
    price = reserved.lending_price_per_gpu
    start, _end = month_bounds(month)
    rows = [row for row in meter(start=start, end=now, now=now) if row.pool_id == reserved.pk]
    borrowed = sum((row.borrowed for row in rows), Decimal(0))
    lent = sum((row.lent for row in rows), Decimal(0))
    lent_by_team: dict[int, Decimal] = {}
    for row in rows:
        lent_by_team[row.team_id] = lent_by_team.get(row.team_id, Decimal(0)) + row.lent
    lines = {
        team_id: sum((c.amount for c in team_lines if c.kind == LineKind.LENDING_CREDIT), Decimal(0))
        for team_id, team_lines in charges.items()
    }
    per_line = {
        str(team_id): {"credit_line": str(lines.get(team_id, Decimal(0))), "lent_gpu_seconds": str(gpu_seconds)}
        for team_id, gpu_seconds in sorted(lent_by_team.items())
        if gpu_seconds or lines.get(team_id)
    }
    credits = sum(lines.values(), Decimal(0))
    return {
        "month": month.isoformat(),
        "lending_credit_lines": str(credits),
        "lent_gpu_seconds": str(lent),
        "borrowed_gpu_seconds": str(borrowed),
        "borrowed_at_lending_price": str(-hourly_cost(borrowed, price)),
        "borrowed_at_hourly_price_paid_by_borrowers": str(hourly_cost(borrowed, reserved.hourly_price_per_gpu)),
        "lending_price_per_gpu_hour": str(price),
        "per_lender": per_line,
        # Each line is its own team's lent GPU-hours × the price, rounded to the cent: what the invoice must say.
        "each_credit_line_equals_its_lent_at_lending_price": all(
            lines.get(team_id, Decimal(0)) == -hourly_cost(gpu_seconds, price)
            for team_id, gpu_seconds in lent_by_team.items()
        ),
        # Σ of lines rounded one by one vs the rounded Σ: may differ by up to half a cent per line.
        "credits_equal_borrowed_at_lending_price": credits == -hourly_cost(borrowed, price),
    }


# === Main ==========================================================================================================


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--day-seconds", type=float, default=150, help="one compressed day")
    parser.add_argument(
        "--trace", choices=("shifts", "uniform"), default="shifts", help="seed 000's shifts, or the earlier trace"
    )
    parser.add_argument(
        "--peak-factor",
        type=float,
        default=2.0,
        help="shifts: a team's GPU load in its working day, as a multiple of its reservation",
    )
    parser.add_argument(
        "--night-load", type=float, default=0.1, help="shifts: a team's GPU load at night, × its reservation"
    )
    parser.add_argument("--jobs", type=int, default=36, help="uniform: jobs per replay")
    parser.add_argument("--soft-share", type=float, default=0.5, help="share of soft jobs (may spill to elastic)")
    parser.add_argument("--reserved-nodes", type=int, default=4, help="eight-GPU nodes of the reserved pool")
    parser.add_argument("--elastic-nodes", type=int, default=2, help="eight-GPU nodes of the elastic pool")
    parser.add_argument("--elastic-quota", type=int, default=8, help="each team's quota in the elastic pool")
    parser.add_argument("--drain-timeout", type=float, default=240, help="seconds a replay may run past its day")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--state-dir", type=Path, default=REPO_ROOT / ".state" / DEFAULT_STATE_NAME)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()
    wall_started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from bench.benchdb import bench_database

    url = bench_database("exchangebench", fresh=True)
    env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="portal.settings.dev", DJANGO_DEBUG="false")
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO_ROOT, env=env, check=True)
    nodes = args.reserved_nodes + args.elastic_nodes
    cluster, reserved_nodes, elastic_nodes = start_cluster(args.state_dir, nodes, args.elastic_nodes / nodes, None)
    env["KUBECONFIG"] = str(cluster.kubeconfig_path)
    os.environ.update(
        {key: env[key] for key in ("DATABASE_URL", "KUBECONFIG", "DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG")}
    )
    os.environ.setdefault("REDIS_URL", env["REDIS_URL"])
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    settings.KUBECONFIG = env["KUBECONFIG"]
    from pools import kueue as kueue_projection
    from portal.celery import app as celery_app

    load_averages = [os.getloadavg()[0]]
    load_stop = threading.Event()

    def sample_load() -> None:
        while not load_stop.wait(10):
            load_averages.append(os.getloadavg()[0])

    threading.Thread(target=sample_load, daemon=True).start()
    children: list[subprocess.Popen] = []
    results = []
    try:
        reserved, elastic, teams = make_portal_rows(reserved_nodes, elastic_nodes, args.elastic_quota)
        celery_app.control.purge()
        kueue_projection.reconcile()
        wait_queues_active(len(teams))
        with connection.cursor() as cursor:
            cursor.execute(TRIGGERS)
        sync = subprocess.Popen(  # noqa: S603 - our own management command
            [sys.executable, "manage.py", "sync_cluster", "--relist"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(args.state_dir / "sync.log", "w"),  # noqa: SIM115 - closed with the process
        )
        children.append(sync)
        wait_listed(("nodes", "pods", "jobs", "workloads"), sync)
        worker = subprocess.Popen(  # noqa: S603 - celery from this venv
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", "cluster", "-P", "threads", "-c", "8"]
            + ["-n", "bench-admission-exchange@%h", "--loglevel=WARNING", "--without-gossip", "--without-mingle"]
            + ["--without-heartbeat"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(args.state_dir / "worker.log", "w"),  # noqa: SIM115
        )
        children.append(worker)
        wait_workers(celery_app, 1, children)
        log(f"setup done after {time.monotonic() - wall_started:.0f}s")

        if args.trace == "shifts":
            trace = make_shift_trace(
                reservation_sizes(args.reserved_nodes),
                args.day_seconds,
                args.peak_factor,
                args.night_load,
                args.soft_share,
                args.seed,
            )
        else:
            trace = make_trace(args.jobs, args.day_seconds, args.soft_share, args.seed)
        offered = trace_summary(trace, args.day_seconds, reservation_sizes(args.reserved_nodes))
        log(f"trace: {len(trace)} jobs, {json.dumps(offered)}")
        limits = {}
        for label, lending in (("off", "none"), ("on", "idle")):
            limits[label] = set_all_lending(teams, lending)
            log(f"lending {lending}: lendingLimits {limits[label]}")
            run = replay(trace, teams, reserved, elastic, label, args.day_seconds + args.drain_timeout)
            results.append(measure(run, label, args.day_seconds, teams, reserved, elastic))
            log(json.dumps(results[-1]))
        invoice = money(reserved)
    finally:
        load_stop.set()
        for child in reversed(children):
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
        if not args.keep:
            cluster.down()

    off, on = results
    gain = None
    if on["utilisation"]["reserved_in_use_by_anyone"] is not None and off["utilisation"]["reserved_in_use_by_anyone"]:
        gain = round(
            on["utilisation"]["reserved_in_use_by_anyone"] - off["utilisation"]["reserved_in_use_by_anyone"], 1
        )
    p95_off, p95_on = off["queue_wait_s"]["p95"], on["queue_wait_s"]["p95"]
    ratio = round(p95_on / p95_off, 3) if p95_on is not None and p95_off else None
    reclaim_p99 = on["reclaim_s"]["p99"]
    summary = {
        "benchmark": "exchange",
        "sizes": {
            "reserved_gpus": reserved_nodes * GPUS_PER_NODE,
            "reservations": [reservation.gpus for _t, _u, reservation in teams],
            "quota_per_team_reserved": reserved_nodes * GPUS_PER_NODE,
            "elastic_gpus": elastic_nodes * GPUS_PER_NODE,
            "elastic_quota_per_team": args.elastic_quota,
            "jobs_per_replay": len(trace),
            "day_seconds": args.day_seconds,
            "soft_share": args.soft_share,
            "seed": args.seed,
            "trace_gpu_seconds": sum(job.gpus * job.run_seconds for job in trace),
        },
        "trace": {
            "kind": args.trace,
            **(
                {"peak_factor": args.peak_factor, "night_load": args.night_load}
                if args.trace == "shifts"
                else {"jobs": args.jobs}
            ),
            **trace_summary(trace, args.day_seconds, [reservation.gpus for _t, _u, reservation in teams]),
        },
        "lending_limits": limits,
        "load_average_1m": {
            "min": round(min(load_averages), 1),
            "mean": round(sum(load_averages) / len(load_averages), 1),
            "max": round(max(load_averages), 1),
        },
        "replays": {"off": off, "on": on},
        "utilisation_gain_points": gain,
        "queue_wait_p95_ratio": ratio,
        "invoice": invoice,
        "wall_seconds": round(time.monotonic() - wall_started, 1),
        "targets": TARGETS,
    }
    summary["targets_met"] = {
        "utilisation_gain": gain is not None and gain >= TARGETS["utilisation_gain_points"],
        "queue_wait_p95_halved": ratio is not None and ratio <= TARGETS["queue_wait_p95_ratio_at_most"],
        "reclaim_p99": reclaim_p99 is not None and reclaim_p99 < TARGETS["reclaim_p99_s"],
        "lender_pods_preempted": off["lender_pods_preempted_inside_reservation"] == 0
        and on["lender_pods_preempted_inside_reservation"] == 0,
        "lent_equals_borrowed": on["lending"]["equal"]
        and off["lending"]["equal"]
        and Decimal(on["lending"]["lent_gpu_seconds"]) > 0
        and Decimal(invoice["lent_gpu_seconds"]) == Decimal(invoice["borrowed_gpu_seconds"])
        and invoice["each_credit_line_equals_its_lent_at_lending_price"],
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
