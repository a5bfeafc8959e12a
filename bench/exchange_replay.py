"""One replay of the lending benchmark's day (bench/exchange.py) on the cluster, and what it measured.

`replay` submits each job of the trace at its moment through `jobs.services.submit_job` while a `Watch` notes every
second which jobs hold borrowed GPUs and whose preemption counter rose; `measure` turns the run into its figures
(utilisation from the portal's own metering, queue wait and reclaim from the sync's marks, preemptions, lent vs
borrowed GPU-seconds); `money` reads the month's invoice lines after both replays.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from bench import harness
from bench.exchange_trace import TraceJob
from bench.harness import spread
from bench.pipeline import job_spec, marks

log = harness.logger("exchange")


def _r(value, digits: int = 1):
    return None if value is None else round(float(value), digits)


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
        from jobs.choices import ADMITTED_STATES
        from jobs.models import Job
        from jobs.selectors import borrowed_gpus

        admitted = list(Job.objects.filter(state__in=ADMITTED_STATES, admitted_pool_id=self.reserved_pool_id))
        borrowed = borrowed_gpus(admitted)
        held: dict[int, int] = {}
        for job in admitted:
            held[job.team_id] = held.get(job.team_id, 0) + job.total_gpus
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
