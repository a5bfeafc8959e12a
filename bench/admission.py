"""Benchmark of admission end to end: the portal's submit service, Celery workers, Kueue, the kube-scheduler,
KWOK and the cluster sync, on a local cluster of 1,000 eight-GPU nodes, 300 teams and 10,000 jobs.

What runs, each as it runs in production:
- a local control plane with Kueue (its own state directory) and two pools of KWOK nodes: one big reserved pool
  and a small elastic one that soft jobs may spill into;
- the portal's rows made through its services: pools, 300 teams with a researcher each, a reservation per team in
  the reserved pool (together 75 % of its contract) and quotas a bit above it (together the whole contract),
  room in the elastic pool; then the Kueue projection (`reconcile.kueue.reconcile`: flavors, 300 team ClusterQueues,
  the unreserved queues, LocalQueues, team namespaces);
- `manage.py sync_cluster` as a process of its own (its resident memory sampled with psutil);
- real Celery workers (``celery -A portal worker -Q cluster``, thread pool) on the Redis of REDIS_URL, running the
  submit task `jobs.submit_job` that creates each suspended Job;
- jobs submitted through `jobs.services.submit_job` from a pool of threads, as web requests would, round-robin over
  the teams; each pod "runs" `--run-seconds` (KWOK's `pod-complete.stage.kwok.x-k8s.io/delay`) so capacity frees up
  and later jobs are admitted as earlier ones finish;
- an observer process that watches Workloads and pods and notes when it sees each change (millisecond clock),
  and database triggers (in the benchmark's own database only) that note when the sync wrote each Workload's
  admission and each job state (`clock_timestamp()`).

Reports (the last line printed is a JSON summary):
- ``admitted_per_second``: Workloads admitted ÷ (last Admitted condition time − first submission), the
  Admitted times read from the cluster (target ≥ 43, Kueue's own threshold run); ``admitted_per_second_steady``
  over the middle 80 % of admissions;
- ``submit_to_running_ms`` p50/p99 of the first wave that fits (per team, the jobs in submission order whose GPUs
  together fit in the team's quota, so none waits for another to finish): from the submit call to the job's
  Running state written in the database (target p99 < 30 s); ``..._cluster_ms`` to the pod's Running as seen by
  the observer;
- ``workload_sync_lag_ms`` p50/p99: the observer seeing a Workload admitted → the sync writing its row admitted
  (target p99 < 2 s); ``job_state_lag_ms``: → the job's state leaving Queued; ``..._from_condition_ms``: from the
  Admitted condition's own time, which has second precision (so it overstates by up to one second);
- ``sync_peak_rss_mb`` (target < 500 MB), CPU seconds per process over the run, counts of every final state.

Usage: ``python bench/admission.py [--nodes 1000] [--teams 300] [--jobs 10000] [--run-seconds 20] ...``
(``--help`` lists all). A quick run: ``--nodes 60 --teams 20 --jobs 400``. Uses its own cluster state directory
(.state/devcluster-bench-admission) and its own database (`<DATABASE_URL name>_admissionbench`, another name for
another --state-dir; dropped and made afresh each run); REDIS_URL's database (default 15) is purged of queued
tasks, so give it one of its own (and each run beside another its own). The smoke tests (tests/bench/) run it with
``--shared-cluster --nodes 4 --teams 2 --jobs 6 --run-seconds 2 --workers 1``.

The pipeline it drives (cluster, pools, sync, workers, the database marks) is bench/pipeline.py, shared with the
lending benchmark; the observer is bench/observer.py.
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

from bench import harness, pipeline  # noqa: E402
from bench.harness import NUMBER, NUMBER_OR_NONE, ProcessSampler, Run, rounded, spread  # noqa: E402
from bench.observer import start as start_observer  # noqa: E402
from bench.pipeline import GPUS_PER_NODE, RESERVED_POOL, job_spec, make_bench_pools  # noqa: E402

TARGETS = {
    "admitted_per_second": 43.0,
    "submit_to_running_p99_ms": 30_000.0,
    "workload_sync_lag_p99_ms": 2000.0,
    "sync_peak_rss_mb": 500.0,
}
DEFAULT_STATE_NAME = "devcluster-bench-admission"
# Reservations take this share of the reserved pool's contract; the quotas add up to all of it.
RESERVED_SHARE = 0.75
ELASTIC_QUOTA = 8
# The figures the README quotes: the admission rate, submit → Running of the first wave, the Workload sync lag, the
# jobs' final states, the sync's memory and each process's CPU, the load beside the run. A rate or a percentile is
# None when nothing was measured (no job admitted, no sample).
SUMMARY_KEYS = {
    "sizes.nodes": int,
    "sizes.teams": int,
    "sizes.jobs": int,
    "jobs_submitted": int,
    "submitted_per_second": NUMBER_OR_NONE,
    "created_in_cluster_per_second": NUMBER_OR_NONE,
    "workloads_admitted": int,
    "admitted_per_second": NUMBER_OR_NONE,
    "admitted_per_second_steady": NUMBER_OR_NONE,
    "first_wave_jobs": int,
    **{
        f"submit_to_running{kind}_ms.{figure}": NUMBER_OR_NONE for kind in ("", "_cluster") for figure in ("p50", "p99")
    },
    "workload_sync_lag_ms.p50": NUMBER_OR_NONE,
    "workload_sync_lag_ms.p99": NUMBER_OR_NONE,
    "job_state_lag_ms.p99": NUMBER_OR_NONE,
    "sync_peak_rss_mb": NUMBER,
    "cpu_seconds.*": NUMBER,
    "final_states": dict,
    "run_seconds": NUMBER,
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


def submit_all(submissions: list[Submission], team_users: list, run_seconds: int, threads: int) -> float:
    from django.db import connection

    from jobs import services
    from pools.models import Pool

    pool = Pool.objects.get(slug=RESERVED_POOL)

    def submit(submission: Submission) -> None:
        team, user = team_users[submission.team_index]
        spec = job_spec(f"bench-{submission.index:05d}", submission.gpus, submission.soft, run_seconds)
        submission.started = time.time()
        try:
            submission.job_id = services.submit_job(team=team, pool=pool, user=user, spec=spec).pk
        except Exception as error:  # noqa: BLE001 - counted and reported
            submission.error = f"{type(error).__name__}: {error}"[:300]
        submission.finished = time.time()

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


# === Main ==========================================================================================================


def first_wave(submissions: list[Submission], job_created: dict[int, float], quota: int) -> list[Submission]:
    """Per team, the jobs in submission order whose GPUs together fit in the team's quota in the reserved pool:
    none of them has to wait for another job to finish."""
    by_team: dict[int, list[Submission]] = {}
    for submission in submissions:
        if submission.job_id is not None:
            by_team.setdefault(submission.team_index, []).append(submission)
    wave = []
    for team_jobs in by_team.values():
        used = 0
        for submission in sorted(team_jobs, key=lambda s: (job_created[s.job_id], s.job_id)):
            used += submission.gpus
            if used > quota:
                break
            wave.append(submission)
    return wave


def measure(*, seen: dict, submissions: list[Submission], quota_per_team: int) -> dict:
    """The run's figures from what the observer saw in the cluster (`seen`) and what the sync wrote (the marks)."""
    from jobs.models import Job

    submitted = [s for s in submissions if s.job_id is not None]
    db_marks = pipeline.marks()
    jobs = {
        row["pk"]: row
        for row in Job.objects.values("pk", "state", "created_at", "cluster_created_at", "admitted_pool__slug")
    }
    created_epoch = {pk: row["created_at"].timestamp() for pk, row in jobs.items()}
    workload_jobs: dict[str, int] = {}
    for uid, workload in seen["workloads"].items():
        name = workload.get("job", "")
        if name.startswith("rsv-") and name[4:].isdigit():
            workload_jobs[uid] = int(name[4:])

    first_submit = min(s.started for s in submitted)
    admitted = {uid: w["Admitted"] for uid, w in seen["workloads"].items() if "Admitted" in w and uid in workload_jobs}
    admitted_times = sorted(condition for condition, _received in admitted.values())
    rate = rate_steady = None
    if admitted_times:
        rate = len(admitted_times) / max(admitted_times[-1] - first_submit, 1e-9)
        low, high = int(0.1 * (len(admitted_times) - 1)), int(0.9 * (len(admitted_times) - 1))
        if admitted_times[high] > admitted_times[low]:
            rate_steady = (high - low) / (admitted_times[high] - admitted_times[low])

    wave = first_wave(submitted, created_epoch, quota_per_team)
    running_db = db_marks.get("job_running", {})
    to_running = [(running_db[str(s.job_id)] - s.started) * 1000 for s in wave if str(s.job_id) in running_db]
    to_running_cluster = [
        (seen["pods"][str(s.job_id)]["running"] - s.started) * 1000
        for s in wave
        if "running" in seen["pods"].get(str(s.job_id), {})
    ]
    to_running_all = [(running_db[str(s.job_id)] - s.started) * 1000 for s in submitted if str(s.job_id) in running_db]

    admitted_db = db_marks.get("workload_admitted", {})
    lag, lag_condition, state_lag = [], [], []
    for uid, (condition, received) in admitted.items():
        if uid in admitted_db:
            lag.append((admitted_db[uid] - received) * 1000)
            lag_condition.append((admitted_db[uid] - condition) * 1000)
        job_key = str(workload_jobs[uid])
        state_times = [db_marks.get(f"job_{state}", {}).get(job_key) for state in ("admitted", "pending", "running")]
        state_times = [at for at in state_times if at is not None]
        if state_times:
            state_lag.append((min(state_times) - received) * 1000)

    created_times = sorted(row["cluster_created_at"].timestamp() for row in jobs.values() if row["cluster_created_at"])
    refused = [s.error for s in submissions if s.job_id is None]
    return {
        "jobs_submitted": len(submitted),
        "jobs_refused": len(refused),
        "refusals": sorted(set(refused))[:3],
        "created_in_cluster_per_second": (
            round(len(created_times) / (created_times[-1] - first_submit), 1) if created_times else None
        ),
        "workloads_admitted": len(admitted_times),
        "admitted_per_second": rounded(rate),
        "admitted_per_second_steady": rounded(rate_steady),
        "last_admission_after_seconds": rounded(admitted_times[-1] - first_submit) if admitted_times else None,
        "first_wave_jobs": len(wave),
        "submit_to_running_ms": spread(to_running),
        "submit_to_running_cluster_ms": spread(to_running_cluster),
        "submit_to_running_all_jobs_ms": spread(to_running_all),
        "workload_sync_lag_ms": spread(lag),
        "workload_sync_lag_from_condition_ms": spread(lag_condition),
        "job_state_lag_ms": spread(state_lag),
        "final_states": count(row["state"] for row in jobs.values()),
        "admitted_pools": count(row["admitted_pool__slug"] for row in jobs.values()),
    }


def count(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[str(value)] = counts.get(str(value), 0) + 1
    return counts


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000, help="eight-GPU KWOK nodes in all")
    parser.add_argument("--elastic-share", type=float, default=0.1, help="share of the nodes in the elastic pool")
    parser.add_argument("--teams", type=int, default=300, help="teams, each a ClusterQueue")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs to submit")
    parser.add_argument("--sizes", type=parse_sizes, default="1:50,2:30,4:20", help="GPUS:WEIGHT per job size")
    parser.add_argument("--soft-share", type=float, default=0.1, help="share of soft jobs (may spill to elastic)")
    parser.add_argument("--run-seconds", type=int, default=20, help="how long each job's pod runs")
    parser.add_argument("--submitters", type=int, default=8, help="threads calling the submit service")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (queue: cluster)")
    parser.add_argument("--worker-threads", type=int, default=8, help="threads per Celery worker")
    parser.add_argument("--timeout", type=float, default=3600, help="give up after this many seconds of run")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--node-lease-seconds", type=int, default=None, help="the KWOK nodes' Lease duration (devcluster's default)"
    )
    harness.add_cluster_arguments(parser, DEFAULT_STATE_NAME)
    args = parser.parse_args()
    if isinstance(args.sizes, str):
        args.sizes = parse_sizes(args.sizes)
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


def main() -> int:
    args = parse_args()
    run = Run("admission")
    # Stopped from outside (SIGTERM): unwind, so the processes it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # One database per state directory: a second run beside the first (another --state-dir) must not drop its tables.
    suffix = "admissionbench" if args.state_dir.name == DEFAULT_STATE_NAME else f"admissionbench_{args.state_dir.name}"
    env = pipeline.bench_env(suffix)
    cluster, reserved_nodes, elastic_nodes = pipeline.start_cluster(
        args, args.nodes, args.elastic_share, log, args.node_lease_seconds
    )
    pipeline.setup_django(env, cluster)
    if args.shared_cluster:
        pipeline.clear_earlier_runs([team_slug(index) for index in range(args.teams)], log)
    from portal.celery import app as celery_app
    from reconcile import kueue as kueue_projection

    children: list[subprocess.Popen] = []
    sampler = ProcessSampler()
    observer_out = args.state_dir / "observer.json"
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

        # The sync, the observer and the Celery workers, each a process of its own.
        sync = pipeline.start_sync(env, args.state_dir)
        children.append(sync)
        sampler.watch("sync_cluster", sync.pid)
        sampler.start()  # the sync's peak RSS includes its first full list
        observer = start_observer(env, observer_out)
        children.append(observer)
        pipeline.wait_listed(("nodes", "pods", "jobs", "workloads"), sync)
        names = {f"bench-admission-{number}" for number in range(args.workers)}
        for name in sorted(names):
            worker = pipeline.start_worker(env, args.state_dir, name, args.worker_threads)
            children.append(worker)
            sampler.watch("celery_workers", worker.pid)
        for record in cluster.records():
            if record.process() is not None:
                sampler.watch(record.name, record.pid)
        sampler.watch("bench_submitters", os.getpid())
        sampler.watch("observer", observer.pid)
        pipeline.wait_workers(celery_app, names, children, log)

        submissions = plan(args.jobs, args.teams, args.sizes, args.soft_share, args.seed)
        run_started = time.time()
        progress_stop = threading.Event()
        threading.Thread(target=report_progress, args=(submissions, run_started, progress_stop), daemon=True).start()
        submit_seconds = submit_all(submissions, team_users, args.run_seconds, args.submitters)
        submitted = [s for s in submissions if s.job_id is not None]
        log(f"submitted {len(submitted)} jobs in {submit_seconds:.1f}s ({len(submissions) - len(submitted)} refused)")
        wait_finished(submitted, run_started, args.timeout)
        run_seconds = time.time() - run_started
        progress_stop.set()
        sampler.finish()
        observer.send_signal(signal.SIGTERM)
        observer.wait(timeout=60)
    finally:
        sampler.finish()
        pipeline.stop_children(children)

    figures = measure(
        seen=json.loads(observer_out.read_text()),
        submissions=submissions,
        quota_per_team=layout.quota_per_team,
    )
    node_lease_seconds = cluster.node_lease_seconds
    harness.stop_cluster(args, cluster)

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
            "quota_per_team": layout.quota_per_team,
            "elastic_quota_per_team": ELASTIC_QUOTA,
            "submitter_threads": args.submitters,
            "celery": f"{args.workers} worker processes x {args.worker_threads} threads",
            "node_lease_seconds": node_lease_seconds,
            "shared_cluster": args.shared_cluster,
        },
        "load_average_1m": run.load_spread(),
        "setup_seconds": {"portal_rows": round(rows_seconds, 1), "kueue_projection": round(projection_seconds, 1)},
        "submit_seconds": round(submit_seconds, 1),
        "submitted_per_second": round(len(submitted) / submit_seconds, 1) if submit_seconds else None,
        **figures,
        "sync_peak_rss_mb": round(sampler.peak_rss.get("sync_cluster", 0) / 2**20, 1),
        "cpu_seconds": sampler.cpu_seconds(),
        "run_seconds": round(run_seconds, 1),
        "targets": TARGETS,
    }
    rate = summary["admitted_per_second"]
    summary["targets_met"] = {
        "admitted_per_second": rate is not None and rate >= TARGETS["admitted_per_second"],
        "submit_to_running_p99": (summary["submit_to_running_ms"]["p99"] or 1e12) < TARGETS["submit_to_running_p99_ms"],
        "workload_sync_lag_p99": (summary["workload_sync_lag_ms"]["p99"] or 1e12) < TARGETS["workload_sync_lag_p99_ms"],
        "sync_peak_rss": summary["sync_peak_rss_mb"] < TARGETS["sync_peak_rss_mb"],
    }
    run.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
