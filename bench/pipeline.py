"""The portal's submit-to-run pipeline on a local cluster, as the admission and lending benchmarks run it.

- a local control plane with Kueue and two pools of KWOK nodes: a reserved A800 pool and a small elastic T4 pool
  that soft jobs may spill into (`start_cluster`), and the portal's two pools for them (`make_bench_pools`);
- the benchmark's own database, fresh each run, and Django set up on it and on that cluster (`setup_django`);
- `manage.py sync_cluster` and Celery workers on the queue `cluster`, each a process of its own (`start_sync`,
  `start_worker`), and the waits until they are ready (`wait_listed`, `wait_workers`, `wait_queues_active`);
- database triggers, in the benchmark's own database only, that note when the sync wrote each Workload's admission
  and each job state (`clock_timestamp()`): `TRIGGERS`, read back with `marks()`;
- a benchmark job: `job_spec`, its pod "running" for a given time on KWOK.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

from bench import harness

REPO_ROOT = harness.REPO_ROOT
KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
RESERVED_POOL, ELASTIC_POOL = "bench-reserved", "bench-elastic"
GPUS_PER_NODE = 8


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


# === The cluster and the database ===================================================================================


def start_cluster(
    args, nodes: int, elastic_share: float, log, node_lease_seconds: int | None = None, tuning: str | None = None
):
    """The cluster of `args` (harness.start_cluster) with `nodes` eight-GPU nodes: `elastic_share` of them (one at
    least) in the elastic pool, the rest in the reserved pool, its controllers tuned as `tuning` says
    (devcluster/tuning.py; the devcluster's default when None). Returns (cluster, reserved nodes, elastic nodes)."""
    from devcluster import topology

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
        source="bench/pipeline.py",
    )
    options = {"node_lease_seconds": node_lease_seconds} if node_lease_seconds else {}
    if tuning:
        options["tuning"] = tuning
    cluster = harness.start_cluster(args, layout, log=log, **options)
    return cluster, reserved_nodes, elastic_nodes


def bench_env(database_suffix: str) -> dict:
    """The environment of the benchmark and of the processes it starts: its own database `<DATABASE_URL
    name>_<suffix>`, dropped and made afresh, the development settings, and a Redis database of its own (REDIS_URL,
    default 15: its queued tasks are purged)."""
    from bench.benchdb import bench_database

    url = bench_database(database_suffix.replace("-", "_")[:40], fresh=True)
    env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="portal.settings.dev", DJANGO_DEBUG="false")
    # Its queued tasks are purged: never the development broker's database (0) unless REDIS_URL says so.
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
    return env


def setup_django(env: dict, cluster) -> None:
    """Django in this process on the benchmark's database, broker and cluster (`env` gets the KUBECONFIG)."""
    env["KUBECONFIG"] = str(cluster.kubeconfig_path)
    os.environ.update(
        {key: env[key] for key in ("DATABASE_URL", "KUBECONFIG", "DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG")}
    )
    os.environ.setdefault("REDIS_URL", env["REDIS_URL"])
    import django

    django.setup()
    from django.conf import settings

    settings.KUBECONFIG = env["KUBECONFIG"]


def clear_earlier_runs(team_slugs: list[str], log, timeout: float = 180) -> None:
    """On a shared cluster (--shared-cluster), delete the team namespaces an earlier run of the benchmark left: their
    Jobs bear the names this run's jobs will get (`rsv-<job id>`, the ids starting at 1 again in a fresh database), so
    a job of this run would be taken as created and never run. Their pods are released from the portal's usage
    finalizer first (no sync records them any more); returns once every one of them is gone."""
    from django.conf import settings

    from cluster import client, resources

    core = client.core()
    names = {f"{settings.TEAM_NAMESPACE_PREFIX}{slug}" for slug in team_slugs}
    left = sorted(names & {item.metadata.name for item in core.list_namespace().items})
    if not left:
        return
    log(f"deleting {len(left)} namespaces an earlier run left on this cluster: {', '.join(left[:5])} …")
    for namespace in left:
        core.delete_namespace(namespace)

    def gone() -> bool:
        present = names & {item.metadata.name for item in core.list_namespace().items}
        for namespace in present:
            for pod in core.list_namespaced_pod(namespace).items:
                if pod.metadata.finalizers:
                    resources.release_pod(namespace, pod.metadata.name)
        return not present

    harness.wait_for(gone, timeout=timeout, what=f"the namespaces {left} to go", interval=1.0)


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


# === The processes beside the benchmark =============================================================================


def niced(command: list[str], nice: int) -> list[str]:
    """`command` run at CPU priority `nice` (0: as it is; `nice` execs it, so the pid is the command's)."""
    return ["nice", "-n", str(nice), *command] if nice else command


def renice_this_thread(nice: int) -> None:
    """Set the calling thread's niceness (Linux: threads it starts inherit it). Nothing when it is already that; going
    back down needs the privilege to (root here): without it the thread stays where it was."""
    if os.getpriority(os.PRIO_PROCESS, 0) != nice:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, nice)


def start_sync(env: dict, log_dir: Path, *, nice: int = 0) -> subprocess.Popen:
    """`manage.py sync_cluster --relist`, its errors logged to `log_dir`/sync.log."""
    return subprocess.Popen(  # noqa: S603 - our own management command
        niced([sys.executable, "manage.py", "sync_cluster", "--relist"], nice),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log_dir / "sync.log", "w"),  # noqa: SIM115 - closed with the process
    )


def start_worker(
    env: dict, log_dir: Path, name: str, threads: int, *, events: bool = False, pool: str = "threads", nice: int = 0
) -> subprocess.Popen:
    """A Celery worker on the queue `cluster` (a pool of `threads` threads, as the chart's cluster worker runs; with
    `pool` "prefork", that many processes), named `name`@host, logging to `log_dir`/<name>.log; with `events`,
    sending its task events (``-E``: when each task was received, started and ended)."""
    return subprocess.Popen(  # noqa: S603 - celery from this venv
        niced(
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", "cluster", "-P", pool, "-c", str(threads)]
            + ["-n", f"{name}@%h", "--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]
            + (["-E"] if events else []),
            nice,
        ),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log_dir / f"{name}.log", "w"),  # noqa: SIM115 - closed with the process
    )


def start_workers(env: dict, args, names, sampler, *, events: bool) -> list[subprocess.Popen]:
    """`start_worker` for each of `names` with `args.worker_threads` and `args.worker_pool`, logging to
    `args.state_dir`, each watched by `sampler` as "celery_workers"."""
    workers = []
    for name in sorted(names):
        workers.append(
            start_worker(
                env,
                args.state_dir,
                name,
                args.worker_threads,
                events=events,
                pool=args.worker_pool,
                nice=getattr(args, "portal_nice", 0),
            )
        )
        sampler.watch("celery_workers", workers[-1].pid)
    return workers


def watch_services(sampler) -> None:
    """Have `sampler` count the CPU of the PostgreSQL server's processes ("postgresql": its backends as they come)
    and of the Redis server ("redis") when they run on this machine: the portal's share of the machine is theirs
    too. Says nothing when they are elsewhere."""
    import psutil
    from django.db import connection

    with contextlib.suppress(psutil.Error), connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = psutil.Process(cursor.fetchone()[0])
        if backend.name().startswith("postgres"):
            sampler.watch_children_of("postgresql", backend.ppid())
    for process in psutil.process_iter(["name"]):
        if process.info["name"] == "redis-server":
            sampler.watch("redis", process.pid)


def watch_children(workers: list[subprocess.Popen], sampler, label: str) -> None:
    """Have `sampler` watch the workers' child processes too (prefork: they run the tasks; a thread pool has none).
    Call once the workers are ready."""
    import psutil

    for worker in workers:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(worker.pid).children(recursive=True):
                sampler.watch(label, child.pid)


def stop_children(children: list[subprocess.Popen]) -> None:
    """SIGTERM every process still running, last started first; SIGKILL what has not gone after 30 s."""
    for child in reversed(children):
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


def wait_queues_active(teams: int, timeout: float = 600) -> None:
    """Until `teams` team ClusterQueues and the two unreserved ones are Active."""
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


def wait_listed(resources: tuple[str, ...], process: subprocess.Popen, timeout: float = 600) -> None:
    """Until the sync has made its first full list of each of `resources`."""
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


def wait_workers(celery_app, names: set[str], children: list[subprocess.Popen], log, timeout: float = 600) -> None:
    """Until every Celery worker of `names` answers a ping (starting one takes a minute on a loaded machine)."""
    started = time.monotonic()
    while True:
        answers = celery_app.control.ping(timeout=2.0) or []
        answered = {name.partition("@")[0] for answer in answers for name in answer}
        if answered >= names:
            log(f"{len(names)} Celery workers answer after {time.monotonic() - started:.0f}s")
            return
        if any(child.poll() is not None for child in children):
            raise RuntimeError("a process the benchmark started has exited; see the logs in the state directory")
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"only {sorted(answered & names)} of {sorted(names)} Celery workers answer")


# === When the sync wrote what =======================================================================================

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


def install_marks() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(TRIGGERS)


def marks() -> dict[str, dict[str, float]]:
    """{kind: {key: epoch seconds}}: e.g. marks()["job_running"]["42"], when job 42's Running state was written."""
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
