"""Benchmark of admission end to end, as ratios to its floor measured in the same run (issue 30): the same jobs
created straight in the cluster (the floor: Kueue, the kube-scheduler and KWOK alone), then submitted through the
portal (its submit service, the outbox, Celery workers, the same cluster, and the cluster sync mirroring each step),
on a local cluster of 40 eight-GPU nodes, 10 teams and 300 jobs by default.

What runs, each as it runs in production:
- a local control plane with Kueue (its own state directory) and two pools of KWOK nodes: one big reserved pool
  and a small elastic one that soft jobs may spill into;
- the portal's rows made through its services: pools, the teams with a researcher each, a reservation per team in
  the reserved pool (together 75 % of its contract) and quotas a bit above it (together the whole contract),
  room in the elastic pool; then the Kueue projection (`reconcile.kueue.reconcile`: flavors, a ClusterQueue per
  team, the unreserved queues, LocalQueues, team namespaces);
- the phases, one after the other on that cluster, the team namespaces drained between them (every Job, pod and
  Workload gone, no ClusterQueue holding quota), each with the same jobs (one plan, one seed), round-robin over the
  teams from `--submitters` threads; each pod "runs" `--run-seconds` (KWOK's
  `pod-complete.stage.kwok.x-k8s.io/delay`) so capacity frees up and later jobs are admitted as earlier ones finish:
  - ``floor`` (bench/admission_floor.py): each job's Job as the portal renders it (suspended, in its team's
    LocalQueue, the same pod template), created with the Kubernetes client — no portal process runs;
  - ``portal``: `manage.py sync_cluster` (its resident memory sampled with psutil) and real Celery workers
    (``celery -A portal worker -Q cluster -P threads -E``: the chart's cluster worker, two replicas of 8 threads;
    ``--worker-pool prefork`` for processes instead) started for it; each job submitted through
    `jobs.services.submit_job`, as web requests would, the submit task `jobs.submit_job` creating its Job;
- an observer process that watches Kueue's Workloads and the portal's pods and notes when it sees each change
  (millisecond clock), and database triggers (in the benchmark's own database only) that note when the sync wrote
  each Workload's admission and each job state (`clock_timestamp()`).

Reports (the last line printed is a JSON summary), for the portal at the top level and for the floor under
``floor``, each measured the same way:
- ``admitted_per_second``: Workloads admitted ÷ (last Admitted condition time − first submission), the Admitted
  times read from the cluster; ``admitted_per_second_steady`` over the middle 80 % of admissions;
- ``submit_to_running_ms`` p50/p99 of the first wave that fits (per team, the jobs in the order they were created
  whose GPUs together fit in the team's quota, so none waits for another to finish): from the submit call (the
  floor's create call) to Running — for the portal the job's Running state written in the database, what its users
  see; ``submit_to_running_cluster_ms`` to the pod's Running as seen by the observer (the floor's own figure);
- the ratios, the targets: ``admitted_per_s_ratio`` = portal ÷ floor admissions a second (target ≥ 0.8),
  ``p99_ratio`` = the portal's p99 submit → Running ÷ the floor's (target ≤ 1.5), ``p99_ratio_cluster`` the same
  with the portal's pods seen Running in the cluster;
- ``workload_sync_lag_ms`` p50/p99: the observer seeing a Workload admitted → the sync writing its row admitted
  (target p99 < 2 s); ``job_state_lag_ms``: → the job's state leaving Queued; ``..._from_condition_ms``: from the
  Admitted condition's own time, which has second precision (so it overstates by up to one second);
- ``portal_profile``: where a first-wave job's time went in the portal phase, stage by stage (submit call, outbox
  publication, queue wait, the submit task, Kueue's admission, the pod's start, the sync writing Running), and
  ``floor_profile`` its floor counterparts (bench/admission_profile.py);
- ``sync_peak_rss_mb`` (target < 500 MB); per phase, CPU seconds by process (PostgreSQL's and Redis's too, when
  they run here), ``apiserver_requests`` by kind and ``apiserver_latency`` (the apiserver's mean time per Job create,
  unsuspend, pod create..., and its priority-and-fairness queueing), states. ``--portal-nice N`` runs the portal's
  processes at CPU niceness N: a diagnostic of what sharing two cores costs the portal, not a target figure.

Usage: ``python bench/admission.py [--nodes 40] [--teams 10] [--jobs 300] [--run-seconds 20] [--phases
floor,portal] ...`` (``--help`` lists all); the larger size of issue 30: ``--nodes 1000 --teams 50 --jobs 1000``.
``--control-plane stock`` starts the cluster with the upstream defaults of Kueue's reconcile concurrency and the
controllers' API rates instead of the devcluster's tuning (devcluster/tuning.py), for both phases: a run with each
says what the tuning gives the floor and the portal apart (``sizes.control_plane`` in the summary).
Uses its own cluster state directory (.state/devcluster-bench-admission) and its own database (`<DATABASE_URL
name>_admissionbench`, another name for another --state-dir; dropped and made afresh each run); REDIS_URL's
database (default 15) is purged of queued tasks, so give it one of its own (and each run beside another its own).
The smoke tests (tests/bench/) run: ``--shared-cluster --nodes 4 --teams 2 --jobs 6 --run-seconds 2 --workers 1``.

The pipeline it drives (cluster, pools, sync, workers, the database marks) is bench/pipeline.py, shared with the
lending benchmark; the observer, bench/observer.py.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench import admission_floor, admission_measure, admission_profile, harness, pipeline  # noqa: E402
from bench.harness import NUMBER, NUMBER_OR_NONE, ProcessSampler, Run, rounded  # noqa: E402
from bench.observer import start as start_observer  # noqa: E402
from bench.pipeline import GPUS_PER_NODE, RESERVED_POOL, job_spec, make_bench_pools  # noqa: E402
from devcluster.tuning import TUNED, TUNINGS  # noqa: E402

PHASES = ("floor", "portal")
DEFAULT_STATE_NAME = "devcluster-bench-admission"
# Reservations take this share of the reserved pool's contract; the quotas add up to all of it.
RESERVED_SHARE = 0.75
ELASTIC_QUOTA = 8
# The figures the documents quote: admission rate, first-wave submit → Running, Workload sync lag, final states, the
# sync's memory, CPU by process, the apiserver's time, the load — of the portal, of the floor, their ratios; where the
# portal's time went. A rate, a percentile or a ratio is None when nothing was measured (none admitted, no phase).
SPREAD = ("p50", "p99")
SUMMARY_KEYS = {
    "sizes.nodes": int,
    "sizes.teams": int,
    "sizes.jobs": int,
    "sizes.control_plane": str,
    "phases": list,
    "jobs_submitted": int,
    "submitted_per_second": NUMBER_OR_NONE,
    "created_in_cluster_per_second": NUMBER_OR_NONE,
    "workloads_admitted": int,
    "admitted_per_second": NUMBER_OR_NONE,
    "admitted_per_second_steady": NUMBER_OR_NONE,
    "first_wave_jobs": int,
    **{f"submit_to_running{kind}_ms.{figure}": NUMBER_OR_NONE for kind in ("", "_cluster") for figure in SPREAD},
    "workload_sync_lag_ms.p50": NUMBER_OR_NONE,
    "workload_sync_lag_ms.p99": NUMBER_OR_NONE,
    "job_state_lag_ms.p99": NUMBER_OR_NONE,
    "floor.jobs_created": int,
    "floor.created_in_cluster_per_second": NUMBER_OR_NONE,
    "floor.workloads_admitted": int,
    "floor.admitted_per_second": NUMBER_OR_NONE,
    "floor.admitted_per_second_steady": NUMBER_OR_NONE,
    "floor.first_wave_jobs": int,
    **{f"floor.submit_to_running_ms.{figure}": NUMBER_OR_NONE for figure in SPREAD},
    "floor.final_states": dict,
    "admitted_per_s_ratio": NUMBER_OR_NONE,
    "p99_ratio": NUMBER_OR_NONE,
    "p99_ratio_cluster": NUMBER_OR_NONE,
    **{
        f"portal_profile.stages_ms.{stage}.{figure}": NUMBER_OR_NONE
        for stage in admission_profile.STAGES
        for figure in SPREAD
    },
    "portal_profile.share_of_median_percent": dict,
    "floor_profile.*.p50": NUMBER_OR_NONE,
    "drain_seconds": NUMBER_OR_NONE,
    "sync_peak_rss_mb": NUMBER,
    "cpu_seconds.*.*": NUMBER,
    "apiserver_requests.*.*": int,
    "apiserver_latency": dict,
    "final_states": dict,
    "run_seconds.*": NUMBER,
    "load_average_1m.min": NUMBER,
    "load_average_1m.mean": NUMBER,
    "load_average_1m.max": NUMBER,
    "targets_met.*": bool,
}
log = harness.logger("bench")


def parse_sizes(text: str) -> list[tuple[int, float]]:
    """ "1:50,2:30,4:20" -> [(1, 50.0), (2, 30.0), (4, 20.0)] (GPUs per job and its weight)."""
    sizes = []
    for part in text.split(","):
        gpus, _, weight = part.partition(":")
        sizes.append((int(gpus), float(weight or 1)))
    if not sizes or any(gpus < 1 or gpus > GPUS_PER_NODE or weight <= 0 for gpus, weight in sizes):
        raise argparse.ArgumentTypeError(f"sizes are GPUS:WEIGHT pairs, 1 ≤ GPUS ≤ {GPUS_PER_NODE}: {text!r}")
    return sizes


# === The portal's rows, made through its services ================================================================


@dataclass(frozen=True)
class Layout:
    contract: int
    reserved_per_team: int
    quota_per_team: int
    elastic_gpus: int


def team_slug(index: int) -> str:
    return f"bench-{index:03d}"


def make_portal_rows(teams: int, reserved_nodes: int, elastic_nodes: int) -> tuple[Layout, list]:
    from django.utils import timezone

    from pools import services as pool_services
    from portal.choices import Role
    from portal.models import Membership, Team, User

    contract = reserved_nodes * GPUS_PER_NODE
    layout = Layout(
        contract=contract,
        reserved_per_team=int(contract * RESERVED_SHARE) // teams,
        quota_per_team=contract // teams,
        elastic_gpus=elastic_nodes * GPUS_PER_NODE,
    )
    if layout.reserved_per_team < 1:
        raise SystemExit(f"{teams} teams cannot each reserve GPUs of a {contract}-GPU pool: add nodes")
    elastic, reserved = make_bench_pools(reserved_nodes, elastic_nodes)
    # People and teams in bulk (a password hash per user would cost minutes and measures nothing here).
    users = User.objects.bulk_create(
        [User(username=f"bench-researcher-{index:03d}", password="!") for index in range(teams)]  # noqa: S106
    )
    team_rows = Team.objects.bulk_create(
        [Team(slug=team_slug(index), name=f"Bench team {index:03d}") for index in range(teams)]
    )
    Membership.objects.bulk_create(
        [Membership(user=user, team=team, role=Role.RESEARCHER) for user, team in zip(users, team_rows, strict=True)]
    )
    now = timezone.now()
    for team in team_rows:
        # Room in the namespace for every job its quotas admit (the defaults allow 20 pods).
        pool_services.set_namespace_limits(
            team=team, max_pods=200, requests_cpu_millicores=128_000, requests_memory_mib=512 * 1024
        )
        pool_services.create_reservation(
            team=team,
            pool=reserved,
            gpus=layout.reserved_per_team,
            starts_at=now - timedelta(days=1),
            ends_at=now + timedelta(days=30),
        )
        pool_services.set_quota(team=team, pool=reserved, max_gpus=layout.quota_per_team)
        pool_services.set_quota(team=team, pool=elastic, max_gpus=ELASTIC_QUOTA)
    return layout, list(zip(team_rows, users, strict=True))


# === Submitting ====================================================================================================


@dataclass
class Submission:
    index: int
    team_index: int
    gpus: int
    soft: bool
    started: float = 0.0
    finished: float = 0.0
    job_id: int | None = None
    error: str = ""
    publish: tuple[float, float] | None = None  # the outbox publication inside the submit call (portal phase)


def plan(jobs: int, teams: int, sizes: list[tuple[int, float]], soft_share: float, seed: int) -> list[Submission]:
    """Jobs round-robin over the teams, sizes and placements drawn with a fixed seed."""
    chooser = random.Random(seed)
    choices, weights = [gpus for gpus, _ in sizes], [weight for _, weight in sizes]
    return [
        Submission(
            index=index,
            team_index=index % teams,
            gpus=chooser.choices(choices, weights)[0],
            soft=chooser.random() < soft_share,
        )
        for index in range(jobs)
    ]


def spec_of(submission: Submission, run_seconds: int):
    """The job a submission submits (the same in every phase)."""
    return job_spec(f"bench-{submission.index:05d}", submission.gpus, submission.soft, run_seconds)


def submit_all(
    submissions: list[Submission], team_users: list, run_seconds: int, threads: int, publish_timer=None
) -> float:
    from django.db import connection

    from jobs import services
    from pools.models import Pool

    pool = Pool.objects.get(slug=RESERVED_POOL)

    def submit(submission: Submission) -> None:
        team, user = team_users[submission.team_index]
        spec = spec_of(submission, run_seconds)
        submission.started = time.time()
        try:
            submission.job_id = services.submit_job(team=team, pool=pool, user=user, spec=spec).pk
        except Exception as error:  # noqa: BLE001 - counted and reported
            submission.error = f"{type(error).__name__}: {error}"[:300]
        submission.finished = time.time()
        if publish_timer is not None:
            submission.publish = publish_timer.take()

    def worker(chunk: list[Submission]) -> None:
        try:
            for submission in chunk:
                submit(submission)
        finally:
            connection.close()

    started = time.monotonic()
    # Each thread takes every `threads`-th job, so the order over teams stays round-robin.
    with ThreadPoolExecutor(max_workers=threads) as executor:
        list(executor.map(worker, [submissions[offset::threads] for offset in range(threads)]))
    return time.monotonic() - started


# === The phases ====================================================================================================


def parse_phases(text: str) -> list[str]:
    phases = [part.strip() for part in text.split(",") if part.strip()]
    if not phases or any(phase not in PHASES for phase in phases) or len(set(phases)) != len(phases):
        raise argparse.ArgumentTypeError(f"phases are some of {', '.join(PHASES)}, each once, in order: {text!r}")
    return phases


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=40, help="eight-GPU KWOK nodes in all")
    parser.add_argument("--elastic-share", type=float, default=0.1, help="share of the nodes in the elastic pool")
    parser.add_argument("--teams", type=int, default=10, help="teams, each a ClusterQueue")
    parser.add_argument("--jobs", type=int, default=300, help="jobs to submit")
    parser.add_argument("--sizes", type=parse_sizes, default="1:50,2:30,4:20", help="GPUS:WEIGHT per job size")
    parser.add_argument("--soft-share", type=float, default=0.1, help="share of soft jobs (may spill to elastic)")
    parser.add_argument("--run-seconds", type=int, default=20, help="how long each job's pod runs")
    parser.add_argument(
        "--phases", type=parse_phases, default="floor,portal", help="the phases to run, in this order (comma-separated)"
    )
    parser.add_argument("--submitters", type=int, default=8, help="threads calling the submit service (or creating)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (queue: cluster)")
    parser.add_argument("--worker-threads", type=int, default=8, help="threads per Celery worker")
    parser.add_argument("--worker-pool", choices=("threads", "prefork"), default="threads", help="the workers' pool")
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the portal's stages (Celery task events, the outbox publication)",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="give up a phase after this many seconds")
    parser.add_argument(
        "--portal-nice",
        type=int,
        default=0,
        help="run the portal's processes (sync, workers, submitters) at this CPU niceness: a diagnostic of what the "
        "two shared cores cost it, not the target's figure",
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--node-lease-seconds", type=int, default=None, help="the KWOK nodes' Lease duration (devcluster's default)"
    )
    parser.add_argument(
        "--control-plane",
        choices=tuple(TUNINGS),
        default=TUNED.name,
        help="the controllers' concurrency and API rates (devcluster/tuning.py): the devcluster's, or the upstream "
        "defaults, for both phases",
    )
    harness.add_cluster_arguments(parser, DEFAULT_STATE_NAME)
    args = parser.parse_args()
    if args.shared_cluster and args.control_plane != TUNED.name:
        parser.error("--control-plane applies to a cluster this run starts: not with --shared-cluster")
    if isinstance(args.sizes, str):
        args.sizes = parse_sizes(args.sizes)
    if isinstance(args.phases, str):
        args.phases = parse_phases(args.phases)
    return args


def wait_finished(submitted: list[Submission], run_started: float, timeout: float) -> None:
    """Until every submitted job has finished, or nothing moved for five minutes, or `timeout` after the start."""
    from jobs.models import Job

    deadline = run_started + timeout
    last_change, last_progress = time.time(), None
    while time.time() < deadline:
        finished = Job.objects.filter(state__in=["succeeded", "failed", "cancelled"]).count()
        if finished >= len(submitted):
            return
        progress_now = (Job.objects.filter(cluster_created_at__isnull=False).count(), pipeline.mark_counts())
        if progress_now != last_progress:
            last_change, last_progress = time.time(), progress_now
        elif time.time() - last_change > 300:
            log(f"nothing moved for 300 s ({finished} of {len(submitted)} jobs finished): stopping")
            return
        time.sleep(2)


def report_progress(submissions: list[Submission], run_started: float, stop: threading.Event) -> None:
    """Every 10 s, a line of how far the run is."""
    from django.db import connection

    from jobs.models import Job

    try:
        while not stop.wait(10):
            counts = pipeline.mark_counts()
            submitted = sum(1 for s in submissions if s.finished)
            created = Job.objects.filter(cluster_created_at__isnull=False).count()
            log(
                f"t={time.time() - run_started:5.0f}s submitted {submitted} created {created} "
                f"workload rows {counts.get('workload_row', 0)} admitted {counts.get('workload_admitted', 0)} "
                f"running {counts.get('job_running', 0)} succeeded {counts.get('job_succeeded', 0)} "
                f"failed {counts.get('job_failed', 0)}"
            )
    finally:
        connection.close()


def run_floor(args, submissions: list[Submission], team_users: list) -> dict:
    """The floor: the same jobs' Jobs created straight in the cluster (bench/admission_floor.py), run to their end."""
    manifests = admission_floor.render_floor_jobs(submissions, team_users, lambda s: spec_of(s, args.run_seconds))
    started = time.time()
    seconds = admission_floor.create_all(submissions, manifests, args.submitters)
    created = [s for s in submissions if s.job_id is not None]
    log(f"floor: created {len(created)} Jobs in {seconds:.1f}s ({len(submissions) - len(created)} refused)")
    outcomes = admission_floor.wait_finished(created, started, args.timeout, log)
    return {"submit_seconds": seconds, "run_seconds": time.time() - started, "outcomes": outcomes}


def run_portal(args, env: dict, submissions: list[Submission], team_users: list, sampler, children: list) -> dict:
    """The portal: the sync and the Celery workers started, the jobs submitted through the submit service and run to
    their end; the processes it started are stopped when it ends."""
    from portal.celery import app as celery_app

    sync = pipeline.start_sync(env, args.state_dir, nice=args.portal_nice)
    processes = [sync]
    children.append(sync)
    sampler.watch("sync_cluster", sync.pid)  # its peak RSS includes its first full list
    events = admission_profile.TaskEvents(celery_app) if args.profile else None
    try:
        pipeline.wait_listed(("nodes", "pods", "jobs", "workloads"), sync)
        names = {f"bench-admission-{number}" for number in range(args.workers)}
        workers = pipeline.start_workers(env, args, names, sampler, events=args.profile)
        processes += workers
        children += workers
        pipeline.wait_workers(celery_app, names, children, log)
        pipeline.watch_children(workers, sampler, "celery_workers")  # prefork: the tasks run in the children
        timer = admission_profile.PublishTimer() if args.profile else None
        pipeline.renice_this_thread(args.portal_nice)  # the submitters' threads inherit it
        if events is not None:
            events.start()
        started = time.time()
        progress_stop = threading.Event()
        threading.Thread(target=report_progress, args=(submissions, started, progress_stop), daemon=True).start()
        seconds = submit_all(submissions, team_users, args.run_seconds, args.submitters, timer)
        submitted = [s for s in submissions if s.job_id is not None]
        log(f"submitted {len(submitted)} jobs in {seconds:.1f}s ({len(submissions) - len(submitted)} refused)")
        wait_finished(submitted, started, args.timeout)
        progress_stop.set()
        return {
            "submit_seconds": seconds,
            "run_seconds": time.time() - started,
            "task_runs": events.by_job() if events is not None else {},
        }
    finally:
        pipeline.renice_this_thread(0)
        if events is not None:
            events.stop()
        pipeline.stop_children(processes)


def cpu_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {label: round(seconds - before.get(label, 0.0), 1) for label, seconds in after.items()}


def main() -> int:
    args = parse_args()
    run = Run("admission")
    # Stopped from outside (SIGTERM): unwind, so the processes it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # One database per state directory: a second run beside the first (another --state-dir) must not drop its tables.
    suffix = "admissionbench" if args.state_dir.name == DEFAULT_STATE_NAME else f"admissionbench_{args.state_dir.name}"
    env = pipeline.bench_env(suffix)
    cluster, reserved_nodes, elastic_nodes = pipeline.start_cluster(
        args, args.nodes, args.elastic_share, log, args.node_lease_seconds, tuning=args.control_plane
    )
    pipeline.setup_django(env, cluster)
    if args.shared_cluster:
        pipeline.clear_earlier_runs([team_slug(index) for index in range(args.teams)], log)
    from cluster.kueue import cluster_queue_name, unreserved_queue_name
    from portal.celery import app as celery_app
    from reconcile import kueue as kueue_projection

    children: list[subprocess.Popen] = []
    sampler = ProcessSampler()
    observer_out = args.state_dir / "observer.json"
    results: dict[str, dict] = {}
    # Each phase's CPU seconds by process, requests made of the apiserver by kind, and its time serving them.
    cpu, requests, latency = {}, {}, {}
    drain_seconds = None
    try:
        started = time.monotonic()
        layout, team_users = make_portal_rows(args.teams, reserved_nodes, elastic_nodes)
        rows_seconds = time.monotonic() - started
        purged = celery_app.control.purge()  # the reconcile tasks the services queued: done below instead
        log(f"portal rows for {args.teams} teams in {rows_seconds:.1f}s ({layout}); purged {purged} queued tasks")
        started = time.monotonic()
        outcome = kueue_projection.reconcile()
        projection_seconds = time.monotonic() - started
        log(
            f"Kueue projection: {len(kueue_projection.summary(outcome).get('created', []))} objects created "
            f"in {projection_seconds:.1f}s"
        )
        pipeline.wait_queues_active(args.teams)
        pipeline.install_marks()
        namespaces = [team.namespace for team, _user in team_users]
        queues = {cluster_queue_name(team.slug) for team, _user in team_users}
        queues |= {unreserved_queue_name(pool) for pool in (RESERVED_POOL, pipeline.ELASTIC_POOL)}

        observer = start_observer(env, observer_out)
        children.append(observer)
        for record in cluster.records():
            if record.process() is not None:
                sampler.watch(record.name, record.pid)
        sampler.watch("bench_submitters", os.getpid())
        sampler.watch("observer", observer.pid)
        pipeline.watch_services(sampler)
        sampler.start()
        # One plan: every phase runs the same jobs, in the same order over the same teams.
        plans = {phase: plan(args.jobs, args.teams, args.sizes, args.soft_share, args.seed) for phase in args.phases}
        for position, phase in enumerate(args.phases):
            if position:
                drain_seconds = admission_floor.drain(namespaces, queues, log)
            log(f"phase {phase}: {args.jobs} jobs")
            requests_before, before = admission_profile.apiserver_reading(), sampler.cpu_seconds()
            if phase == "floor":
                results[phase] = run_floor(args, plans[phase], team_users)
            else:
                results[phase] = run_portal(args, env, plans[phase], team_users, sampler, children)
            time.sleep(2 * sampler.interval)  # a last sample of the phase
            cpu[phase] = cpu_between(before, sampler.cpu_seconds())
            requests_after = admission_profile.apiserver_reading()
            requests[phase] = admission_profile.requests_since(requests_before, requests_after)
            latency[phase] = admission_profile.apiserver_latency(requests_before, requests_after)
        sampler.finish()
        observer.send_signal(signal.SIGTERM)
        observer.wait(timeout=60)
    finally:
        sampler.finish()
        pipeline.stop_children(children)

    seen = json.loads(observer_out.read_text())
    quota = layout.quota_per_team
    portal, floor, profile, floor_profile = {}, None, None, None
    if "portal" in results:
        portal, wave, db_marks = admission_measure.measure_portal(
            seen=seen, submissions=plans["portal"], quota_per_team=quota
        )
        if args.profile:
            profile = admission_profile.breakdown(
                wave=wave,
                seen=seen,
                task_runs=results["portal"]["task_runs"],
                running_db=db_marks.get("job_running", {}),
            )
    if "floor" in results:
        floor, floor_wave = admission_measure.measure_floor(
            seen=seen, submissions=plans["floor"], outcomes=results["floor"]["outcomes"], quota_per_team=quota
        )
        floor_profile = admission_profile.floor_breakdown(wave=floor_wave, seen=seen)
    node_lease_seconds = cluster.node_lease_seconds
    control_plane = cluster.running_tuning() or "not recorded"  # a cluster started before tunings were recorded
    harness.stop_cluster(args, cluster)

    portal_run = results.get("portal", {})
    submitted = portal.get("jobs_submitted", 0)
    summary = {
        "sizes": {
            "nodes": args.nodes,
            "reserved_nodes": reserved_nodes,
            "elastic_nodes": elastic_nodes,
            "teams": args.teams,
            "cluster_queues": args.teams + 2,
            "jobs": args.jobs,
            "job_gpus": {str(gpus): weight for gpus, weight in args.sizes},
            "soft_share": args.soft_share,
            "run_seconds": args.run_seconds,
            "contracted_gpus": layout.contract,
            "reserved_per_team": layout.reserved_per_team,
            "quota_per_team": quota,
            "elastic_quota_per_team": ELASTIC_QUOTA,
            "submitter_threads": args.submitters,
            "celery": f"{args.workers} worker processes x {args.worker_threads} {args.worker_pool}",
            "portal_nice": args.portal_nice,
            "node_lease_seconds": node_lease_seconds,
            "control_plane": control_plane,
            "shared_cluster": args.shared_cluster,
        },
        "phases": args.phases,
        "load_average_1m": run.load_spread(),
        "setup_seconds": {"portal_rows": round(rows_seconds, 1), "kueue_projection": round(projection_seconds, 1)},
        "submit_seconds": rounded(portal_run.get("submit_seconds")),
        "submitted_per_second": (
            round(submitted / portal_run["submit_seconds"], 1) if portal_run.get("submit_seconds") else None
        ),
        **portal,
        "floor": floor,
        **admission_measure.ratios(portal, floor),
        "portal_profile": profile,
        "floor_profile": floor_profile,
        "drain_seconds": rounded(drain_seconds),
        "sync_peak_rss_mb": round(sampler.peak_rss.get("sync_cluster", 0) / 2**20, 1),
        "cpu_seconds": cpu,
        "apiserver_requests": requests,
        "apiserver_latency": latency,
        "run_seconds": {phase: round(result["run_seconds"], 1) for phase, result in results.items()},
        "targets": admission_measure.TARGETS,
    }
    summary["targets_met"] = admission_measure.targets_met(summary)
    run.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
