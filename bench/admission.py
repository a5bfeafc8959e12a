"""Benchmark of admission end to end: the portal's submit service, Celery workers, Kueue, the kube-scheduler,
KWOK and the cluster sync, on a local cluster of 1,000 eight-GPU nodes, 300 teams and 10,000 jobs.

What runs, each as it runs in production:
- a local control plane with Kueue (its own state directory) and two pools of KWOK nodes: one big reserved pool
  and a small elastic one that soft jobs may spill into;
- the portal's rows made through its services: pools, 300 teams with a researcher each, a reservation per team in
  the reserved pool (together 75 % of its contract) and quotas a bit above it (together the whole contract),
  room in the elastic pool; then the Kueue projection (`pools.kueue.reconcile`: flavors, 300 team ClusterQueues,
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
tasks, so give it one of its own (and each run beside another its own).
"""

from __future__ import annotations

import argparse
import contextlib
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
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

TARGETS = {
    "admitted_per_second": 43.0,
    "submit_to_running_p99_ms": 30_000.0,
    "workload_sync_lag_p99_ms": 2000.0,
    "sync_peak_rss_mb": 500.0,
}
KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
DEFAULT_STATE_NAME = "devcluster-bench-admission"
RESERVED_POOL, ELASTIC_POOL = "bench-reserved", "bench-elastic"
GPUS_PER_NODE = 8
# Reservations take this share of the reserved pool's contract; the quotas add up to all of it.
RESERVED_SHARE = 0.75
ELASTIC_QUOTA = 8


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def spread(values: list[float], tail: float = 0.99) -> dict:
    """p50, the `tail` percentile (named p99 for 0.99, p95 for 0.95), max and the number of samples."""
    return {
        "p50": _round(percentile(values, 0.5)),
        f"p{round(tail * 100)}": _round(percentile(values, tail)),
        "max": _round(max(values) if values else None),
        "samples": len(values),
    }


def job_spec(name: str, gpus: int, soft: bool, run_seconds: int):
    """A benchmark job: soft or strict placement, its pod "running" `run_seconds` on KWOK."""
    from jobs.choices import Placement
    from jobs.specs import JobSpec

    return JobSpec(
        name=name,
        image="registry.example.com/bench/train:1.0",
        gpus=gpus,
        command=["python", "train.py"],
        placement=Placement.SOFT if soft else Placement.STRICT,
        pod_annotations={KWOK_DELAY: f"{run_seconds}s"},
    )


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def parse_sizes(text: str) -> list[tuple[int, float]]:
    """ "1:50,2:30,4:20" -> [(1, 50.0), (2, 30.0), (4, 20.0)] (GPUs per job and its weight)."""
    sizes = []
    for part in text.split(","):
        gpus, _, weight = part.partition(":")
        sizes.append((int(gpus), float(weight or 1)))
    if not sizes or any(gpus < 1 or gpus > GPUS_PER_NODE or weight <= 0 for gpus, weight in sizes):
        raise argparse.ArgumentTypeError(f"sizes are GPUS:WEIGHT pairs, 1 ≤ GPUS ≤ {GPUS_PER_NODE}: {text!r}")
    return sizes


# === The observer: a process of its own that notes when it sees Workloads and pods change =======================


def _epoch(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def observe(kubeconfig: str, out: Path) -> None:
    """Watch Workloads and the portal's pods until SIGTERM, then write what was seen (and when) to `out`."""
    import functools

    from kubernetes import client, config

    from cluster.watch import ListWatch, run_forever

    api = config.new_client_from_config(config_file=kubeconfig)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    stop = threading.Event()
    workloads: dict[str, dict] = {}
    pods: dict[str, dict] = {}
    lock = threading.Lock()

    def on_workload(kind: str, obj: dict) -> None:
        now = time.time()
        metadata = obj.get("metadata") or {}
        owner = next((ref["name"] for ref in metadata.get("ownerReferences") or [] if ref.get("kind") == "Job"), "")
        with lock:
            seen = workloads.setdefault(
                metadata.get("uid", ""),
                {"job": owner, "created": _epoch(metadata.get("creationTimestamp")), "first_seen": now},
            )
            for condition in (obj.get("status") or {}).get("conditions") or []:
                kind_ = condition.get("type")
                wanted = kind_ in ("QuotaReserved", "Admitted", "Finished") and kind_ not in seen
                if wanted and condition.get("status") == "True":
                    seen[kind_] = [_epoch(condition.get("lastTransitionTime")), now]

    def on_pod(kind: str, obj: dict) -> None:
        now = time.time()
        metadata = obj.get("metadata") or {}
        job_id = (metadata.get("labels") or {}).get("reservoir.io/job-id")
        if not job_id:
            return
        with lock:
            seen = pods.setdefault(job_id, {"first_seen": now})
            phase = (obj.get("status") or {}).get("phase")
            if (obj.get("spec") or {}).get("nodeName") and "bound" not in seen:
                seen["bound"] = now
            if phase == "Running" and "running" not in seen:
                seen["running"] = now

    def relisted(handler):
        def on_relist(items: list[dict], version: str) -> None:
            for item in items:
                handler("ADDED", item)

        return on_relist

    watches = [
        ListWatch(
            name="workloads",
            list_call=functools.partial(custom.list_cluster_custom_object, "kueue.x-k8s.io", "v1beta2", "workloads"),
            on_relist=relisted(on_workload),
            on_event=on_workload,
            stop=stop,
        ),
        ListWatch(
            name="pods",
            list_call=core.list_pod_for_all_namespaces,
            list_kwargs={"label_selector": "app.kubernetes.io/managed-by=reservoir"},
            on_relist=relisted(on_pod),
            on_event=on_pod,
            stop=stop,
        ),
    ]
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run_forever(watches, versions={})
    while not stop.is_set():
        stop.wait(0.5)
    for watch in watches:
        watch.close()
    with lock:
        out.write_text(json.dumps({"workloads": workloads, "pods": pods}))


# === Processes the benchmark runs beside itself ====================================================================


class Sampler:
    """Samples the CPU time of a set of processes (and the peak RSS of one) every `interval` seconds."""

    def __init__(self, interval: float = 0.2):
        import psutil

        self.psutil = psutil
        self.interval = interval
        self.watched: dict[str, list] = {}  # label -> [psutil.Process, ...]
        self.cpu: dict[int, tuple[str, float, float]] = {}  # pid -> (label, first seen, last seen)
        self.peak_rss: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.started = False

    def watch(self, label: str, pid: int) -> None:
        with contextlib.suppress(self.psutil.Error):
            self.watched.setdefault(label, []).append(self.psutil.Process(pid))

    def start(self) -> None:
        self.started = True
        self.thread.start()

    def _sample(self) -> None:
        for label, processes in list(self.watched.items()):
            rss = 0
            for process in processes:
                try:
                    times = process.cpu_times()
                    total = times.user + times.system
                    rss += process.memory_info().rss
                except self.psutil.Error:
                    continue
                first = self.cpu.get(process.pid, (label, total, total))[1]
                self.cpu[process.pid] = (label, first, total)
            self.peak_rss[label] = max(self.peak_rss.get(label, 0), rss)

    def _run(self) -> None:
        while not self.stop.is_set():
            self._sample()
            self.stop.wait(self.interval)

    def finish(self) -> None:
        self.stop.set()
        if self.started:
            self.thread.join(timeout=10)

    def cpu_seconds(self) -> dict[str, float]:
        result: dict[str, float] = {}
        for label, first, last in self.cpu.values():
            result[label] = result.get(label, 0.0) + last - first
        return {label: round(value, 1) for label, value in sorted(result.items())}


def start_cluster(state_dir: Path, nodes: int, elastic_share: float, node_lease_seconds: int | None):
    from devcluster import build, launcher, topology

    elastic_nodes = max(1, round(nodes * elastic_share))
    reserved_nodes = nodes - elastic_nodes
    shape = {"nvidia.com/gpu": str(GPUS_PER_NODE), "cpu": "96", "memory": "768Gi", "pods": "110"}
    allocatable = {"nvidia.com/gpu": str(GPUS_PER_NODE), "cpu": "94", "memory": "750Gi", "pods": "110"}

    def pool(name: str, count: int, gpu_model: str) -> topology.Pool:
        return topology.Pool(
            name=name,
            node_names=tuple(f"{name}-{number:05d}" for number in range(1, count + 1)),
            gpu_model=gpu_model,
            labels={"node-role": name},
            taints=(topology.Taint(key="workload", value=name, effect="NoSchedule"),),
            capacity=shape,
            allocatable=allocatable,
        )

    layout = topology.Topology(
        pools=(
            pool(RESERVED_POOL, reserved_nodes, "NVIDIA-A800-SXM4-80GB"),
            pool(ELASTIC_POOL, elastic_nodes, "Tesla-T4"),
        ),
        source="bench/admission.py",
    )
    build.ensure_built(log)
    lease = {"node_lease_seconds": node_lease_seconds} if node_lease_seconds else {}
    cluster = launcher.Cluster(state_dir, progress=log, **lease)
    cluster.down()
    cluster.up(layout)
    return cluster, reserved_nodes, elastic_nodes


# === The portal's rows, made through its services ================================================================


@dataclass(frozen=True)
class Layout:
    contract: int
    reserved_per_team: int
    quota_per_team: int
    elastic_gpus: int


def make_bench_pools(reserved_nodes: int, elastic_nodes: int):
    """The benchmarks' two pools: a reserved A800 pool of `reserved_nodes` eight-GPU nodes (all contracted) that
    spills to an elastic T4 pool of up to `elastic_nodes`. Returns (elastic, reserved)."""
    from pools import services as pool_services
    from pools.choices import PoolKind
    from pools.models import Pool

    contract = reserved_nodes * GPUS_PER_NODE
    elastic = pool_services.save_pool(
        pool=Pool(
            slug=ELASTIC_POOL,
            name="Bench elastic (T4)",
            kind=PoolKind.ELASTIC,
            gpu_model="Tesla-T4",
            node_selector={"node-role": ELASTIC_POOL},
            taints=[{"key": "workload", "value": ELASTIC_POOL, "effect": "NoSchedule"}],
            hourly_price_per_gpu=Decimal("1.1"),
            min_nodes=0,
            max_nodes=elastic_nodes,
            gpus_per_node=GPUS_PER_NODE,
        )
    )
    reserved = pool_services.save_pool(
        pool=Pool(
            slug=RESERVED_POOL,
            name="Bench reserved (A800)",
            kind=PoolKind.RESERVED,
            gpu_model="NVIDIA-A800-SXM4-80GB",
            node_selector={"node-role": RESERVED_POOL},
            taints=[{"key": "workload", "value": RESERVED_POOL, "effect": "NoSchedule"}],
            contracted_gpus=contract,
            monthly_price_per_gpu=Decimal("9800"),
            hourly_price_per_gpu=Decimal("18"),
            min_nodes=reserved_nodes,
            max_nodes=reserved_nodes,
        ),
        spill_pools=[elastic],
    )
    return elastic, reserved


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
        [Team(slug=f"bench-{index:03d}", name=f"Bench team {index:03d}") for index in range(teams)]
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


def wait_queues_active(teams: int, timeout: float = 600) -> None:
    from cluster import client
    from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION

    api = client.custom_objects()
    deadline = time.monotonic() + timeout
    while True:
        items = api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")["items"]
        active = sum(
            1
            for item in items
            if any(
                c.get("type") == "Active" and c.get("status") == "True"
                for c in (item.get("status") or {}).get("conditions") or []
            )
        )
        if active >= teams + 2:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {active} of {teams + 2} ClusterQueues active after {timeout:.0f}s")
        time.sleep(1)


TRIGGERS = """
CREATE TABLE bench_marks (kind text NOT NULL, key text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(),
                          PRIMARY KEY (kind, key));
CREATE FUNCTION bench_workload_mark() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO bench_marks (kind, key) VALUES ('workload_row', NEW.uid) ON CONFLICT DO NOTHING;
  END IF;
  IF NEW.admitted AND (TG_OP = 'INSERT' OR NOT OLD.admitted) THEN
    INSERT INTO bench_marks (kind, key) VALUES ('workload_admitted', NEW.uid) ON CONFLICT DO NOTHING;
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER bench_workload_mark AFTER INSERT OR UPDATE ON jobs_workload
  FOR EACH ROW EXECUTE FUNCTION bench_workload_mark();
CREATE FUNCTION bench_jobevent_mark() RETURNS trigger AS $$
BEGIN
  IF NEW.to_state <> '' THEN
    INSERT INTO bench_marks (kind, key) VALUES ('job_' || NEW.to_state, NEW.job_id::text) ON CONFLICT DO NOTHING;
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER bench_jobevent_mark AFTER INSERT ON jobs_jobevent
  FOR EACH ROW EXECUTE FUNCTION bench_jobevent_mark();
"""


def marks() -> dict[str, dict[str, float]]:
    from django.db import connection

    result: dict[str, dict[str, float]] = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT kind, key, extract(epoch FROM at) FROM bench_marks")
        for kind, key, at in cursor.fetchall():
            result.setdefault(kind, {})[key] = float(at)
    return result


def mark_counts() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT kind, count(*) FROM bench_marks GROUP BY kind")
        return dict(cursor.fetchall())


def wait_listed(resources: tuple[str, ...], process: subprocess.Popen, timeout: float = 600) -> None:
    from jobs.models import SyncState

    deadline = time.monotonic() + timeout
    while True:
        listed = set(
            SyncState.objects.filter(resource__in=resources, listed_at__isnull=False).values_list("resource", flat=True)
        )
        if listed >= set(resources):
            return
        if process.poll() is not None:
            raise RuntimeError("sync_cluster exited before it had listed everything")
        if time.monotonic() > deadline:
            raise RuntimeError(f"sync_cluster listed only {sorted(listed)} after {timeout:.0f}s")
        time.sleep(0.5)


def wait_workers(celery_app, count: int, children: list[subprocess.Popen], timeout: float = 600) -> None:
    """Until every Celery worker answers a ping (starting one takes a minute on a loaded machine)."""
    started = time.monotonic()
    while True:
        answers = celery_app.control.ping(timeout=2.0) or []
        names = {name for answer in answers for name in answer if name.startswith("bench-admission-")}
        if len(names) >= count:
            log(f"{len(names)} Celery workers answer after {time.monotonic() - started:.0f}s")
            return
        if any(child.poll() is not None for child in children):
            raise RuntimeError("a process the benchmark started has exited; see the logs in the state directory")
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"only {sorted(names)} of {count} Celery workers answer after {timeout:.0f}s")


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


def main() -> int:
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
    parser.add_argument("--state-dir", type=Path, default=REPO_ROOT / ".state" / DEFAULT_STATE_NAME)
    parser.add_argument(
        "--node-lease-seconds", type=int, default=None, help="the KWOK nodes' Lease duration (devcluster's default)"
    )
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--observe", nargs=2, metavar=("KUBECONFIG", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.observe:
        observe(args.observe[0], Path(args.observe[1]))
        return 0
    if isinstance(args.sizes, str):
        args.sizes = parse_sizes(args.sizes)

    # Stopped from outside (SIGTERM): unwind, so the processes it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from bench.benchdb import bench_database

    # One database per state directory: a second run beside the first (another --state-dir) must not drop its tables.
    suffix = "admissionbench" if args.state_dir.name == DEFAULT_STATE_NAME else f"admissionbench_{args.state_dir.name}"
    url = bench_database(suffix.replace("-", "_")[:40], fresh=True)
    env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="portal.settings.dev", DJANGO_DEBUG="false")
    # Its queued tasks are purged: never the development broker's database (0) unless REDIS_URL says so.
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO_ROOT, env=env, check=True)

    cluster, reserved_nodes, elastic_nodes = start_cluster(
        args.state_dir, args.nodes, args.elastic_share, args.node_lease_seconds
    )
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
    from jobs.models import Job
    from pools import kueue as kueue_projection
    from portal.celery import app as celery_app

    children: list[subprocess.Popen] = []
    sampler = Sampler()
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
        wait_queues_active(args.teams)
        with connection.cursor() as cursor:
            cursor.execute(TRIGGERS)

        # The sync, the observer and the Celery workers, each a process of its own.
        sync = subprocess.Popen(  # noqa: S603 - our own management command
            [sys.executable, "manage.py", "sync_cluster", "--relist"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(args.state_dir / "sync.log", "w"),  # noqa: SIM115 - closed with the process
        )
        children.append(sync)
        sampler.watch("sync_cluster", sync.pid)
        sampler.start()  # the sync's peak RSS includes its first full list
        observer = subprocess.Popen(  # noqa: S603 - this script
            [sys.executable, __file__, "--observe", env["KUBECONFIG"], str(observer_out)], cwd=REPO_ROOT, env=env
        )
        children.append(observer)
        wait_listed(("nodes", "pods", "jobs", "workloads"), sync)
        for number in range(args.workers):
            worker = subprocess.Popen(  # noqa: S603 - celery from this venv
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "portal",
                    "worker",
                    "-Q",
                    "cluster",
                    "-P",
                    "threads",
                    "-c",
                    str(args.worker_threads),
                    "-n",
                    f"bench-admission-{number}@%h",
                    "--loglevel=WARNING",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(args.state_dir / f"worker-{number}.log", "w"),  # noqa: SIM115
            )
            children.append(worker)
            sampler.watch("celery_workers", worker.pid)
        for record in cluster.records():
            if record.process() is not None:
                sampler.watch(record.name, record.pid)
        sampler.watch("bench_submitters", os.getpid())
        sampler.watch("observer", observer.pid)
        wait_workers(celery_app, args.workers, children)

        submissions = plan(args.jobs, args.teams, args.sizes, args.soft_share, args.seed)
        run_started = time.time()
        progress_stop = threading.Event()
        load_averages: list[float] = [os.getloadavg()[0]]  # the machine's 1-minute load, every 10 s

        def progress() -> None:
            from django.db import connection as thread_connection

            try:
                while not progress_stop.wait(10):
                    load_averages.append(os.getloadavg()[0])
                    counts = mark_counts()
                    submitted = sum(1 for s in submissions if s.finished)
                    created = Job.objects.filter(cluster_created_at__isnull=False).count()
                    log(
                        f"t={time.time() - run_started:5.0f}s submitted {submitted} created {created} "
                        f"workload rows {counts.get('workload_row', 0)} admitted {counts.get('workload_admitted', 0)} "
                        f"running {counts.get('job_running', 0)} succeeded {counts.get('job_succeeded', 0)} "
                        f"failed {counts.get('job_failed', 0)}"
                    )
            finally:
                thread_connection.close()

        reporter = threading.Thread(target=progress, daemon=True)
        reporter.start()
        submit_seconds = submit_all(submissions, team_users, args.run_seconds, args.submitters)
        submitted = [s for s in submissions if s.job_id is not None]
        log(f"submitted {len(submitted)} jobs in {submit_seconds:.1f}s ({len(submissions) - len(submitted)} refused)")

        # Wait until every job has finished (or nothing moves for five minutes, or the timeout).
        deadline = run_started + args.timeout
        last_change, last_progress = time.time(), None
        while time.time() < deadline:
            finished = Job.objects.filter(state__in=["succeeded", "failed", "cancelled"]).count()
            if finished >= len(submitted):
                break
            progress_now = (Job.objects.filter(cluster_created_at__isnull=False).count(), mark_counts())
            if progress_now != last_progress:
                last_change, last_progress = time.time(), progress_now
            elif time.time() - last_change > 300:
                log(f"nothing moved for 300 s ({finished} of {len(submitted)} jobs finished): stopping")
                break
            time.sleep(5)
        run_seconds = time.time() - run_started
        progress_stop.set()
        sampler.finish()
        observer.send_signal(signal.SIGTERM)
        observer.wait(timeout=60)
    finally:
        sampler.finish()
        for child in reversed(children):
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()

    # --- what was seen ------------------------------------------------------------------------------------------
    seen = json.loads(observer_out.read_text())
    db_marks = marks()
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

    wave = first_wave(submitted, created_epoch, layout.quota_per_team)
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

    states: dict[str, int] = {}
    for row in jobs.values():
        states[row["state"]] = states.get(row["state"], 0) + 1
    created_times = sorted(row["cluster_created_at"].timestamp() for row in jobs.values() if row["cluster_created_at"])
    refused = [s.error for s in submissions if s.job_id is None]

    if not args.keep:
        cluster.down()

    summary = {
        "benchmark": "admission",
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
            "node_lease_seconds": cluster.node_lease_seconds,
        },
        "load_average_1m": {
            "min": round(min(load_averages), 1),
            "mean": round(sum(load_averages) / len(load_averages), 1),
            "max": round(max(load_averages), 1),
        },
        "setup_seconds": {"portal_rows": round(rows_seconds, 1), "kueue_projection": round(projection_seconds, 1)},
        "jobs_submitted": len(submitted),
        "jobs_refused": len(refused),
        "refusals": sorted(set(refused))[:3],
        "submit_seconds": round(submit_seconds, 1),
        "submitted_per_second": round(len(submitted) / submit_seconds, 1) if submit_seconds else None,
        "created_in_cluster_per_second": (
            round(len(created_times) / (created_times[-1] - first_submit), 1) if created_times else None
        ),
        "workloads_admitted": len(admitted_times),
        "admitted_per_second": _round(rate),
        "admitted_per_second_steady": _round(rate_steady),
        "last_admission_after_seconds": _round(admitted_times[-1] - first_submit) if admitted_times else None,
        "first_wave_jobs": len(wave),
        "submit_to_running_ms": spread(to_running),
        "submit_to_running_cluster_ms": spread(to_running_cluster),
        "submit_to_running_all_jobs_ms": spread(to_running_all),
        "workload_sync_lag_ms": spread(lag),
        "workload_sync_lag_from_condition_ms": spread(lag_condition),
        "job_state_lag_ms": spread(state_lag),
        "sync_peak_rss_mb": round(sampler.peak_rss.get("sync_cluster", 0) / 2**20, 1),
        "cpu_seconds": sampler.cpu_seconds(),
        "run_seconds": round(run_seconds, 1),
        "final_states": states,
        "admitted_pools": _count(row["admitted_pool__slug"] for row in jobs.values()),
        "targets": TARGETS,
    }
    summary["targets_met"] = {
        "admitted_per_second": rate is not None and rate >= TARGETS["admitted_per_second"],
        "submit_to_running_p99": (summary["submit_to_running_ms"]["p99"] or 1e12) < TARGETS["submit_to_running_p99_ms"],
        "workload_sync_lag_p99": (summary["workload_sync_lag_ms"]["p99"] or 1e12) < TARGETS["workload_sync_lag_p99_ms"],
        "sync_peak_rss": summary["sync_peak_rss_mb"] < TARGETS["sync_peak_rss_mb"],
    }
    print(json.dumps(summary))
    return 0


def _count(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        key = str(value)
        counts[key] = counts.get(key, 0) + 1
    return counts


if __name__ == "__main__":
    sys.exit(main())
