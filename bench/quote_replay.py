"""Benchmark: is the start-time quote calibrated? Three traces replayed through the real path, each job's quote at
submit against its real start (issue 28, part 3). Run it as ``python bench/quote.py --replay [options]`` (or this
file directly).

What runs, each as in production (bench/pipeline.py, as in the admission and lending benchmarks): a local control
plane with Kueue and KWOK nodes (a reserved pool of `--reserved-nodes` eight-GPU nodes that spills to an elastic
pool of `--elastic-nodes`), `manage.py sync_cluster` and a Celery worker as processes of their own, and the
portal's rows made through its services. Each trace (bench/quote_trace.py: ``steady``, ``burst``, ``priority``) gets
teams of its own, with their reservations, quotas and lending; the earlier trace's reservations are deleted and its
quotas set to 0 first, so each trace has the pool to itself. Each job is submitted at its moment through
`jobs.services.submit_job`, its pod "running" its real run time on KWOK (`pod-complete.stage.kwok.x-k8s.io/delay`),
always less than its maximum run time (one to three minutes: time compressed), and when stopped (preempted) taking
the trace's time to exit (`pod-terminate.stage.kwok.x-k8s.io/delay`: at once, or checkpointing for part of its
grace period). Right after the submit call the
benchmark takes the job's quote as the API and pages show it (`jobs.quote_selectors.quotes_for`) and the baseline
Kueue's maintainers suggest (KEP-168-2: the jobs ahead in the team's queue × the team's mean time between its 20
most recent admissions, Kueue's admission times of its Workloads as the sync mirrors them); once every job has ended
(or `--drain-timeout`), its real start is when an observer watching the cluster (bench/observer.py, as the admission
benchmark's) saw its pod Running, on this machine's millisecond clock (the portal's `started_at`, truncated to the
second by the cluster, when it missed it).

History: before each trace, `--warm-up-history` finished jobs per team (30 by default; 0: none, the quote then
starts on its wide prior) are written straight into the database, drawn from the same distribution of run times as
the trace with a seed of their own and finished before the trace starts; from then on the quote reads what the
trace's own jobs did, only those finished before each quote (`jobs.quote_selectors.run_fractions`), never a later
one.

Reports per trace (bench/quote_trace.py's `score`): ``coverage`` of the 80 % interval (target 75–90 %) and its
``coverage_ci95`` (Clopper-Pearson), ``median_width_s``, ``starts_now_running_within_60s`` (target ≥ 95 %),
``median_abs_error_s`` and ``baseline_median_abs_error_s`` (target: the first at most half the second,
``error_ratio``). Every job's record (quote, baseline, start) is written to `--records-dir`/<trace>.jsonl
(.state/quote-replay/ by default).

Usage: ``python bench/quote.py --replay [--jobs 300] [--traces steady,burst,priority] [--seed 7] ...``. Uses its own
cluster state directory (.state/devcluster-bench-quote) and database (`<DATABASE_URL name>_quotereplay`, dropped and
made afresh each run); REDIS_URL's database is purged of queued tasks: give it one of its own. The smoke tests run
it with ``--shared-cluster --jobs 8 --run-scale 0.05 --reserved-nodes 2 --elastic-nodes 1``.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench import harness, pipeline  # noqa: E402
from bench.harness import NUMBER, NUMBER_OR_NONE, Run  # noqa: E402
from bench.observer import start as start_observer  # noqa: E402
from bench.pipeline import GPUS_PER_NODE, KWOK_DELAY  # noqa: E402
from bench.quote_trace import (  # noqa: E402
    BASELINE_ADMISSIONS,
    SHAPES,
    TRACES,
    Outcome,
    baseline_start,
    make_trace,
    mean_time_between,
    reservations,
    score,
    trace_summary,
    warm_up_history,
)

DEFAULT_STATE_NAME = "devcluster-bench-quote"
KWOK_STOP_DELAY = "pod-terminate.stage.kwok.x-k8s.io/delay"  # how long a stopped pod takes to exit
# The figures docs/quote.md and docs/benchmarks.md quote, per trace: coverage and its 95 % CI, the interval's median
# width, "starts now" within 60 s, the estimate's and the baseline's median absolute error and their ratio, and
# whether each target was met. A figure is None when the trace measured nothing for it.
SUMMARY_KEYS = {
    **{
        f"traces.{kind}.{path}": value
        for kind in TRACES
        for path, value in {
            "jobs": int,
            "quoted": int,
            "never_started": int,
            "coverage": NUMBER_OR_NONE,
            "coverage_ci95": (list, type(None)),
            "coverage_starts_now": NUMBER_OR_NONE,
            "coverage_queued": NUMBER_OR_NONE,
            "sync_lag_s.p50": NUMBER_OR_NONE,
            "sync_lag_s.p90": NUMBER_OR_NONE,
            "median_width_s": NUMBER_OR_NONE,
            "starts_now_jobs": int,
            "starts_now_running_within_60s": NUMBER_OR_NONE,
            "median_abs_error_s": NUMBER_OR_NONE,
            "baseline_median_abs_error_s": NUMBER_OR_NONE,
            "error_ratio": NUMBER_OR_NONE,
            "queued_median_abs_error_s": NUMBER_OR_NONE,
            "queued_baseline_median_abs_error_s": NUMBER_OR_NONE,
            "queued_jobs": int,
            "preemptions": int,
            "spilled_jobs": int,
            "observed_starts": int,
            "window_seconds": NUMBER,
            "wall_seconds": NUMBER,
            "targets_met.coverage": bool,
            "targets_met.starts_now": bool,
            "targets_met.error_vs_baseline": bool,
        }.items()
    },
    "sizes.jobs_per_trace": int,
    "sizes.warm_up_history": int,
    "all_targets_met": bool,
    "load_average_1m.max": NUMBER,
    "wall_seconds": NUMBER,
}
log = harness.logger("quote-replay")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=300, help="jobs per trace")
    parser.add_argument("--traces", default=",".join(TRACES), help="which traces, in order")
    parser.add_argument("--reserved-nodes", type=int, default=16, help="eight-GPU nodes of the reserved pool")
    parser.add_argument("--elastic-nodes", type=int, default=3, help="eight-GPU nodes of the elastic pool")
    parser.add_argument("--warm-up-history", type=int, default=30, help="finished jobs per team before a trace")
    parser.add_argument("--run-scale", type=float, default=1.0, help="× every real run time (smoke runs: < 1)")
    parser.add_argument("--drain-timeout", type=float, default=300, help="seconds a trace may run past its window")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--records-dir", type=Path, default=harness.STATE_ROOT / "quote-replay", help="where each job's record goes"
    )
    harness.add_cluster_arguments(parser, DEFAULT_STATE_NAME)
    args = parser.parse_args(argv)
    args.traces = [kind.strip() for kind in args.traces.split(",") if kind.strip()]
    unknown = set(args.traces) - set(TRACES)
    if unknown:
        parser.error(f"unknown traces {sorted(unknown)}: choose from {', '.join(TRACES)}")
    return args


def team_slugs(kind: str) -> list[str]:
    return [f"qr-{kind}-{team.name}" for team in SHAPES[kind]]


# === The portal's rows =============================================================================================


def set_up_trace(kind: str, reserved, elastic, earlier: list) -> list:
    """The trace's teams with their reservations, quotas and lending; the earlier trace's reservations deleted and
    its quotas set to 0, so the trace has the pool to itself. Returns [(team, user, reservation)]."""
    from django.utils import timezone

    from pools import services as pool_services
    from pools.choices import Lending
    from portal.choices import Role
    from portal.models import Membership, Team, User

    for team, _user, reservation in earlier:
        pool_services.delete_reservation(reservation=reservation)
        pool_services.set_quota(team=team, pool=reserved, max_gpus=0)
        pool_services.set_quota(team=team, pool=elastic, max_gpus=0)
    shape = SHAPES[kind]
    now = timezone.now()
    teams = []
    for team_shape, slug, gpus in zip(
        shape, team_slugs(kind), reservations(shape, reserved.contracted_gpus), strict=True
    ):
        user = User.objects.create(username=f"{slug}-lead", password="!")  # noqa: S106
        team = Team.objects.create(slug=slug, name=f"Quote {kind} {team_shape.name.upper()}")
        Membership.objects.create(user=user, team=team, role=Role.LEAD)
        pool_services.set_namespace_limits(
            team=team, max_pods=400, requests_cpu_millicores=512_000, requests_memory_mib=2048 * 1024
        )
        reservation = pool_services.create_reservation(
            team=team, pool=reserved, gpus=gpus, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=30)
        )
        pool_services.set_quota(team=team, pool=reserved, max_gpus=round(gpus * team_shape.quota_factor))
        if team_shape.elastic_quota:
            pool_services.set_quota(team=team, pool=elastic, max_gpus=team_shape.elastic_quota)
        pool_services.set_lending(reservation=reservation, lending=Lending.IDLE if team_shape.lends else Lending.NONE)
        teams.append((team, user, reservation))
    return teams


def seed_history(kind: str, teams: list, reserved, per_team: int, seed: int, run_scale: float) -> int:
    """`per_team` finished jobs per team, drawn from the trace's distribution with a seed of their own, all finished
    before now (the warm-up history; never scored)."""
    from django.utils import timezone

    from jobs.choices import JobState
    from jobs.models import Job

    now = timezone.now()
    rows = []
    for index, (team, user, _reservation) in enumerate(teams):
        for number, (gpus, max_run, seconds) in enumerate(warm_up_history(kind, index, per_team, seed, run_scale)):
            finished = now - timedelta(minutes=5 + per_team - number)
            started = finished - timedelta(seconds=seconds)
            rows.append(
                Job(
                    team=team,
                    pool=reserved,
                    submitted_by=user,
                    name=f"warm-up-{number}",
                    image="registry.example.com/bench/train:1.0",
                    gpus=gpus,
                    max_run_minutes=max_run,
                    state=JobState.SUCCEEDED,
                    created_at=started - timedelta(seconds=5),
                    state_changed_at=finished,
                    started_at=started,
                    finished_at=finished,
                )
            )
    Job.objects.bulk_create(rows)
    return len(rows)


# === One trace =====================================================================================================


def admissions(team_id: int, now) -> list[float]:
    """The team queue's most recent admissions up to `now`, as Kueue stamped them on its Workloads (the sync's
    mirror): what the baseline's rate is taken over."""
    from jobs.models import Workload

    times = (
        Workload.objects.filter(job__team_id=team_id, admitted_at__lte=now)
        .order_by("-admitted_at")
        .values_list("admitted_at", flat=True)[:BASELINE_ADMISSIONS]
    )
    return [moment.timestamp() for moment in times]


def submit_and_quote(trace_job, kind: str, teams, reserved) -> dict:
    """Submit one job of the trace and take its quote and the baseline at once (the job just Queued)."""
    from django.db import connection
    from django.utils import timezone

    from jobs import services
    from jobs.choices import Placement
    from jobs.quote_selectors import quotes_for
    from jobs.specs import JobSpec

    team, user, _reservation = teams[trace_job.team]
    spec = JobSpec(
        name=f"{kind}-{trace_job.index:03d}",
        image="registry.example.com/bench/train:1.0",
        gpus=trace_job.gpus,
        command=["python", "train.py"],
        placement=Placement.SOFT if trace_job.soft else Placement.STRICT,
        priority=trace_job.priority,
        max_run_minutes=trace_job.max_run_minutes,
        pod_annotations={KWOK_DELAY: f"{trace_job.run_seconds}s", KWOK_STOP_DELAY: f"{trace_job.stop_seconds}s"},
    )
    record = {**vars(trace_job), "team": SHAPES[kind][trace_job.team].name}
    try:
        job = services.submit_job(team=team, pool=reserved, user=user, spec=spec)
        now = timezone.now()
        quote = quotes_for([job], now=now).get(job.pk)
        ahead = (services.queue_position(job) or 1) - 1
        seen = admissions(team.pk, now)
        record.update(
            job_id=job.pk,
            submitted=job.created_at.timestamp(),
            quoted_at=now.timestamp(),
            starts_now=bool(quote and quote.starts_now),
            never=quote is None or quote.never,
            estimate=quote.estimate.timestamp() if quote and quote.estimate else None,
            low=quote.low.timestamp() if quote and quote.low else None,
            high=quote.high.timestamp() if quote and quote.high else None,
            basis=quote.basis if quote else [],
            ahead=ahead,
            mean_time_between_admissions=mean_time_between(seen),
            baseline=baseline_start(job.created_at.timestamp(), ahead, seen),
        )
    except Exception as error:  # noqa: BLE001 - counted and reported
        record["error"] = f"{type(error).__name__}: {error}"[:300]
    finally:
        connection.close()
    return record


def replay(kind: str, trace, teams, reserved, drain_timeout: float, seen: dict) -> tuple[list[dict], dict]:
    """Submit every job at its moment, quote it, wait until every job has ended; its records with its real start:
    when the portal first saw it Running (`running_seen_at`), when the observer (`seen`, filled once it has stopped)
    saw its pod Running, and the portal's `started_at`."""
    from jobs import services
    from jobs.choices import FINAL_STATES
    from jobs.models import Job

    t0 = time.time()

    def submit(trace_job):
        delay = t0 + trace_job.at - time.time()
        if delay > 0:
            time.sleep(delay)
        return submit_and_quote(trace_job, kind, teams, reserved)

    stop = threading.Event()
    threading.Thread(target=_progress, args=(kind, t0, stop), daemon=True).start()
    with ThreadPoolExecutor(max_workers=12) as executor:
        records = list(executor.map(submit, trace))
    ids = [record["job_id"] for record in records if "job_id" in record]
    window = max((job.at for job in trace), default=0.0)
    log(f"{kind}: {len(ids)} submitted ({len(records) - len(ids)} refused) in {time.time() - t0:.0f}s")
    deadline = time.time() + drain_timeout
    open_jobs = len(ids)
    while time.time() < deadline:
        open_jobs = Job.objects.filter(pk__in=ids).exclude(state__in=FINAL_STATES).count()
        if not open_jobs:
            break
        time.sleep(2)
    stop.set()
    rows = {
        row["pk"]: row
        for row in Job.objects.filter(pk__in=ids).values(
            "pk", "started_at", "running_seen_at", "state", "preemptions", "admitted_pool"
        )
    }
    seen.update(seen.pop("stop")())  # the observer's notes, once it has written them
    for record in records:
        row = rows.get(record.get("job_id"))
        if row:
            record["started"] = row["started_at"].timestamp() if row["started_at"] else None
            record["seen"] = row["running_seen_at"].timestamp() if row["running_seen_at"] else None
            record["observed"] = seen.get("pods", {}).get(str(record["job_id"]), {}).get("running")
            record.update(state=row["state"], preemptions=row["preemptions"], admitted_pool=row["admitted_pool"])
    left = Job.objects.filter(pk__in=ids).exclude(state__in=FINAL_STATES)
    for job in left:  # a timed-out replay must not hold the pool for the next trace
        services.cancel_job(job=job, user=None)
    figures = {
        "window_seconds": round(window, 1),
        "wall_seconds": round(time.time() - t0, 1),
        "unfinished_at_drain_timeout": open_jobs,
        "preemptions": sum(record.get("preemptions") or 0 for record in records),
        "spilled_jobs": sum(
            1 for record in records if record.get("admitted_pool") not in (None, reserved.pk) and record.get("started")
        ),
        "final_states": {
            state: sum(1 for record in records if record.get("state") == state)
            for state in sorted({record.get("state") for record in records if record.get("state")})
        },
        "errors": [record["error"] for record in records if "error" in record][:5],
    }
    return records, figures


def _progress(kind: str, t0: float, stop: threading.Event) -> None:
    from django.db import connection

    from jobs.models import Job

    try:
        while not stop.wait(15):
            states: dict[str, int] = {}
            for state in Job.objects.filter(
                team__slug__startswith=f"qr-{kind}-", created_at__gte=datetime.fromtimestamp(t0, UTC)
            ).values_list("state", flat=True):
                states[state] = states.get(state, 0) + 1
            log(f"{kind} t={time.time() - t0:4.0f}s {json.dumps(states, sort_keys=True)}")
    finally:
        connection.close()


def stop_observer(observer: subprocess.Popen, out: Path) -> dict:
    """Stop the observer and read what it saw ({} when it wrote nothing)."""
    observer.send_signal(signal.SIGTERM)
    try:
        observer.wait(timeout=60)
        return json.loads(out.read_text())
    except (subprocess.TimeoutExpired, OSError, ValueError) as error:
        log(f"the observer wrote nothing ({error}): real starts from started_at alone")
        return {}


def outcomes(records: list[dict]) -> list[Outcome]:
    return [
        Outcome(
            submitted=record["submitted"],
            starts_now=record["starts_now"],
            never=record["never"],
            estimate=record["estimate"],
            low=record["low"],
            high=record["high"],
            baseline=record["baseline"],
            started=record.get("started"),
            observed=record.get("observed"),
            seen=record.get("seen"),
        )
        for record in records
        if "job_id" in record
    ]


# === Main ==========================================================================================================


def main(argv=None) -> int:
    args = parse_args(argv)
    run = Run("quote_replay")
    wall_started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    env = pipeline.bench_env("quotereplay")
    nodes = args.reserved_nodes + args.elastic_nodes
    cluster, reserved_nodes, elastic_nodes = pipeline.start_cluster(args, nodes, args.elastic_nodes / nodes, log)
    pipeline.setup_django(env, cluster)
    if args.shared_cluster:
        pipeline.clear_earlier_runs([slug for kind in TRACES for slug in team_slugs(kind)], log)
    from portal.celery import app as celery_app
    from reconcile import kueue as kueue_projection

    children: list[subprocess.Popen] = []
    results: dict[str, dict] = {}
    try:
        elastic, reserved = pipeline.make_bench_pools(reserved_nodes, elastic_nodes)
        celery_app.control.purge()
        sync = pipeline.start_sync(env, args.state_dir)
        children.append(sync)
        pipeline.wait_listed(("nodes", "pods", "jobs", "workloads"), sync)
        children.append(pipeline.start_worker(env, args.state_dir, "bench-quote", 8))
        pipeline.wait_workers(celery_app, {"bench-quote"}, children, log)
        log(f"setup done after {time.monotonic() - wall_started:.0f}s")
        earlier: list = []
        team_count = 0
        for kind in args.traces:
            teams = set_up_trace(kind, reserved, elastic, earlier)
            team_count += len(teams)
            kueue_projection.reconcile()
            pipeline.wait_queues_active(team_count)
            seeded = seed_history(kind, teams, reserved, args.warm_up_history, args.seed, args.run_scale)
            trace = make_trace(kind, args.jobs, reserved.contracted_gpus, args.seed, args.run_scale)
            offered = trace_summary(trace, kind, reserved.contracted_gpus)
            log(f"{kind}: {json.dumps(offered)}; {seeded} warm-up jobs")
            observer = start_observer(env, args.state_dir / f"observer-{kind}.json")
            children.append(observer)
            seen = {"stop": functools.partial(stop_observer, observer, args.state_dir / f"observer-{kind}.json")}
            records, figures = replay(kind, trace, teams, reserved, args.drain_timeout, seen)
            figures["observed_starts"] = sum(1 for record in records if record.get("observed") is not None)
            args.records_dir.mkdir(parents=True, exist_ok=True)
            (args.records_dir / f"{kind}.jsonl").write_text(
                "".join(json.dumps(record, default=str) + "\n" for record in records)
            )
            results[kind] = {**score(outcomes(records)), **figures, "trace": offered}
            log(f"{kind}: {json.dumps(results[kind])}")
            earlier = teams
    finally:
        pipeline.stop_children(children)
        harness.stop_cluster(args, cluster)

    summary = {
        "sizes": {
            "jobs_per_trace": args.jobs,
            "traces": args.traces,
            "reserved_gpus": reserved_nodes * GPUS_PER_NODE,
            "elastic_gpus": elastic_nodes * GPUS_PER_NODE,
            "warm_up_history": args.warm_up_history,
            "run_scale": args.run_scale,
            "seed": args.seed,
            "shared_cluster": args.shared_cluster,
        },
        "traces": results,
        "all_targets_met": bool(results) and all(all(r["targets_met"].values()) for r in results.values()),
        "load_average_1m": run.load_spread(),
        "wall_seconds": round(time.monotonic() - wall_started, 1),
    }
    run.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
