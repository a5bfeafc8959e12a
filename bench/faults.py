"""Fault benchmark: bursts of submissions and cancels through the API while, one at a time, a service fails.

Starts everything of its own, on free loopback ports, and never touches the shared services: a PostgreSQL cluster
(`pg_createcluster <version> benchfaults`), a Redis with append-only persistence (as `make dev` runs it), a local
control plane (.state/devcluster-bench-faults), and the portal's processes as `make dev` starts them — web
(gunicorn), Celery worker, Celery beat, the outbox dispatcher and the cluster sync.

Faults, one at a time, each during its own burst (submissions at a steady rate, every CANCEL_EVERY-th accepted
job cancelled a moment later): worker SIGKILL (right after it received a submit task, so that one is cut off
mid-run with its message unacknowledged), Redis restart, `redis-wipe` (the worker stalls with SIGSTOP so that
messages pile up in Redis, then Redis restarts with its data gone, as without persistence: every queued submit,
delete and retry is lost), PostgreSQL restart, sync SIGKILL, apiserver restart, and Kueue restart when the
devcluster runs a `kueue` component (skipped with a note otherwise). A killed process is started again by its
supervisor (scripts/supervise.sh, as under `make dev`) a second later; a stopped Redis or PostgreSQL is started
again after OUTAGE seconds.

For each fault:
- accepted / rejected_5xx / connection_errors: what the clients were answered;
- lost: accepted submissions that never reached the cluster (not cancelled, and no Job was ever created);
- phantom: requests answered with an error whose change was saved (a job row, or a cancel);
- duplicated: a submission saved twice, or a job that got a second Job or pod;
- cancelled_but_running: cancelled jobs whose Job or pods still run once everything has settled;
- converge_s: from the service being back to: every accepted job that is not cancelled has its Job, no cancelled
  job has one, and the outbox is empty. It includes the rest of the burst (the fault comes --fault-at seconds into
  it), so it bounds the time from above; settled_after_last_answer_s counts from the burst's last answer instead;
- usage: each job's usage intervals as the portal recorded them vs the cluster's own pod records, watched by this
  benchmark (independently of the sync): [PodScheduled time, container finish time), GPUs; `exact` when equal.

Usage: ``.venv/bin/python bench/faults.py [--only worker,redis] [--burst 20] [--rate 1.5] [--apiserver-down 25]
[--keep]`` (``--apiserver-down``: seconds the API server stays stopped, so that the portal's watches back off as
they do when a loaded machine takes that long to stop and start it).
The last line printed is the JSON summary.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

STATE_DIR = REPO_ROOT / ".state" / "bench-faults"
CLUSTER_DIR = REPO_ROOT / ".state" / "devcluster-bench-faults"
PG_CLUSTER = "benchfaults"
TEAM = "faults"
POOL = "reserved-a800"
KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
CANCEL_EVERY = 4
OUTAGE = 5.0
TARGETS = {"lost": 0, "phantom": 0, "duplicated": 0, "cancelled_but_running": 0, "converge_s": 60.0}
FAULTS = ("worker", "redis", "redis-wipe", "postgres", "sync", "apiserver", "kueue")


def log(message: str) -> None:
    print(f"[faults {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait(predicate, *, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - not there yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# --- the services ------------------------------------------------------------------------------------------------


class Postgres:
    """A PostgreSQL cluster of the benchmark's own (Debian's pg_createcluster), on a free port."""

    def __init__(self):
        self.version = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: [int(p) for p in v.split(".")])[-1]
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgres://reservoir:reservoir@127.0.0.1:{self.port}/reservoir"

    def _ctl(self, *args: str) -> None:
        subprocess.run(["pg_ctlcluster", self.version, PG_CLUSTER, *args], check=True)

    def create(self) -> None:
        self.drop()
        subprocess.run(
            ["pg_createcluster", self.version, PG_CLUSTER, "-p", str(self.port)], check=True, stdout=subprocess.DEVNULL
        )
        self.start()
        psql = ["runuser", "-u", "postgres", "--", "psql", "-p", str(self.port), "-qc"]
        subprocess.run([*psql, "create role reservoir login createdb password 'reservoir'"], check=True)
        subprocess.run([*psql, "create database reservoir owner reservoir"], check=True)

    def start(self) -> None:
        self._ctl("start")
        wait(self.ready, timeout=30, what="PostgreSQL")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def ready(self) -> bool:
        result = subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True)
        return result.returncode == 0

    def drop(self) -> None:
        listed = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True).stdout.split()
        if PG_CLUSTER in listed:
            subprocess.run(["pg_dropcluster", "--stop", self.version, PG_CLUSTER], check=False)


class Redis:
    """redis-server with append-only persistence (as scripts/services.sh runs it), on a free port."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(  # noqa: S603 - a fixed binary with our own arguments
            [shutil.which("redis-server"), "--bind", "127.0.0.1", "--port", str(self.port)]
            + ["--dir", str(self.directory), "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
            + ["--logfile", str(self.directory / "redis.log")],
            start_new_session=True,
        )
        wait(self.ready, timeout=20, what="Redis")

    def ready(self) -> bool:
        result = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
        return "PONG" in result.stdout

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()  # a clean shutdown: the append-only file is flushed
            self.process.wait(timeout=30)
            self.process = None


class Portal:
    """The portal's processes as `make dev` starts them: each under scripts/supervise.sh (started again when it
    exits), in a process group of its own."""

    def __init__(self, env: dict, logs: Path):
        self.env = env
        self.logs = logs
        self.web_port = free_port()
        self.processes: dict[str, subprocess.Popen] = {}
        python = sys.executable
        celery = str(Path(sys.executable).parent / "celery")
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        self.commands = {
            "web": [gunicorn, "portal.wsgi:application", "--bind", f"127.0.0.1:{self.web_port}"]
            + ["--worker-class", "gthread", "--workers", "2", "--threads", "4", "--log-level", "warning"],
            "worker": [celery, "-A", "portal", "worker", "-Q", "default,cluster,billing", "-c", "2"]
            + ["--loglevel=INFO", "--without-mingle", "--without-gossip"],
            "beat": [celery, "-A", "portal", "beat", "--loglevel=INFO", "--schedule", str(logs / "beat-schedule")],
            "outbox": [python, "manage.py", "dispatch_outbox"],
            "sync": [python, "manage.py", "sync_cluster"],
        }

    def start(self, name: str) -> None:
        supervised = ["bash", str(REPO_ROOT / "scripts" / "supervise.sh"), name, *self.commands[name]]
        with (self.logs / f"{name}.log").open("a") as out:
            self.processes[name] = subprocess.Popen(  # noqa: S603 - our own commands
                supervised, cwd=REPO_ROOT, env=self.env, stdout=out, stderr=out, start_new_session=True
            )
        if name == "web":
            wait(self._web_up, timeout=60, what="the web server")

    def crash(self, name: str) -> None:
        """SIGKILL the process (and its children, e.g. the worker's pool), not its supervisor: it starts again."""
        import psutil

        supervisor = psutil.Process(self.processes[name].pid)
        for child in supervisor.children():
            if child.name() == "sleep":
                continue
            for process in [*child.children(recursive=True), child]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.send_signal(signal.SIGKILL)

    def restarts(self, name: str) -> int:
        return (self.logs / f"{name}.log").read_text(errors="replace").count(f"[supervise] {name} exited")

    def _web_up(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.web_port, timeout=2)
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for name in list(self.processes):
            try:
                self.kill(name, signal.SIGTERM)
            except subprocess.TimeoutExpired:
                self.kill(name, signal.SIGKILL)


# --- what the cluster shows, watched by the benchmark itself --------------------------------------------------------


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


@dataclass
class PodRecord:
    uid: str
    job_id: int
    gpus: int
    scheduled_at: datetime | None = None
    finished_at: datetime | None = None
    phase: str = ""
    deleting: bool = False
    gone: bool = False


class ClusterRecorder:
    """Every pod and Job of the team namespace, from the apiserver's own list and watch (reconnecting through an
    apiserver restart), so that the portal's records can be compared with the cluster's."""

    def __init__(self, namespace: str):
        self.namespace = namespace
        self.pods: dict[str, PodRecord] = {}
        self.job_uids: dict[int, set[str]] = {}
        self.jobs: dict[int, dict] = {}  # job id -> the latest Job object (None once deleted)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=("pods",), daemon=True),
            threading.Thread(target=self._run, args=("jobs",), daemon=True),
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _record_pod(self, kind: str, pod: dict) -> None:
        metadata = pod.get("metadata") or {}
        label = (metadata.get("labels") or {}).get("reservoir.io/job-id", "")
        if not label.isdigit():
            return
        status = pod.get("status") or {}
        containers = (pod.get("spec") or {}).get("containers") or []
        gpus = sum(int(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", 0)) for c in containers)
        record = self.pods.setdefault(metadata["uid"], PodRecord(metadata["uid"], int(label), gpus))
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
                record.scheduled_at = _time(condition.get("lastTransitionTime"))
        finished = [
            _time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for s in status.get("containerStatuses") or []
        ]
        finished = [f for f in finished if f]
        if finished:
            record.finished_at = max(finished)
        record.phase = status.get("phase") or record.phase
        record.deleting = bool(metadata.get("deletionTimestamp"))
        record.gone = kind == "DELETED"

    def _record_job(self, kind: str, job: dict) -> None:
        metadata = job.get("metadata") or {}
        label = (metadata.get("labels") or {}).get("reservoir.io/job-id", "")
        if not label.isdigit():
            return
        self.job_uids.setdefault(int(label), set()).add(metadata["uid"])
        self.jobs[int(label)] = None if kind == "DELETED" else job

    def _run(self, what: str) -> None:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        from cluster import client

        client.reset()
        record = self._record_pod if what == "pods" else self._record_job
        version = None
        while not self.stop.is_set():
            try:
                api = client.core() if what == "pods" else client.batch()
                lister = api.list_namespaced_pod if what == "pods" else api.list_namespaced_job
                if version is None:
                    listed = json.loads(lister(self.namespace, _preload_content=False, _request_timeout=10).data)
                    with self.lock:
                        for item in listed["items"]:
                            record("ADDED", item)
                    version = listed["metadata"]["resourceVersion"]
                response = lister(
                    self.namespace,
                    watch=True,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                    _preload_content=False,
                    _request_timeout=(5, 90),
                )
                for line in iter_resp_lines(response):
                    if self.stop.is_set():
                        break
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        version = None if event["object"].get("code") == 410 else version
                        break
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        with self.lock:
                            record(event["type"], event["object"])
            except ApiException as error:
                if error.status == 410:
                    version = None
                time.sleep(0.5)
            except Exception:  # noqa: BLE001 - the apiserver restarts: resume from the last version
                client.reset()
                time.sleep(0.5)


# --- the load -------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    kind: str  # submit | cancel
    name: str
    status: int  # 0: no answer (connection refused, reset, timeout)
    job_id: int | None = None
    error: str = ""
    retry_after: bool = False  # an error answered with a Retry-After header


@dataclass
class Burst:
    fault: str
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)


class Api:
    def __init__(self, port: int, token: str):
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict | None = None) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("POST", path, json.dumps(body or {}), self.headers)
            response = connection.getresponse()
            raw = response.read()
            try:
                data = json.loads(raw)
            except ValueError:
                data = {"non_json": raw[:200].decode(errors="replace")}
            if response.getheader("Retry-After"):
                data["_retry_after"] = response.getheader("Retry-After")
            return response.status, data
        finally:
            connection.close()


def run_burst(api: Api, burst: Burst, *, duration: float, rate: float, runs_for: str) -> None:
    """Submissions at `rate` per second for `duration` s; every CANCEL_EVERY-th accepted job is cancelled 1.5 s
    after it was accepted. Each request runs in its own thread, so a slow answer delays no other."""
    pool = ThreadPoolExecutor(max_workers=32)
    accepted = 0
    accepted_lock = threading.Lock()

    def cancel(job_id: int, name: str) -> None:
        time.sleep(1.5)
        try:
            status, data = api.post(f"/api/v1/jobs/{job_id}/cancel/")
            burst.add(Outcome("cancel", name, status, job_id, retry_after="_retry_after" in data))
        except OSError as error:
            burst.add(Outcome("cancel", name, 0, job_id, type(error).__name__))

    def submit(index: int) -> None:
        nonlocal accepted
        name = f"{burst.fault}-{index:03d}"
        body = {
            "team": TEAM,
            "pool": POOL,
            "name": name,
            "image": "registry.example.com/bench/faults:1",
            "gpus": 1,
            "pod_annotations": {KWOK_DELAY: runs_for},
        }
        try:
            status, data = api.post("/api/v1/jobs/", body)
        except OSError as error:
            burst.add(Outcome("submit", name, 0, None, type(error).__name__))
            return
        job_id = data.get("id") if 200 <= status < 300 else None
        error = "" if job_id else json.dumps(data)[:200]
        burst.add(Outcome("submit", name, status, job_id, error, retry_after="_retry_after" in data))
        if job_id:
            with accepted_lock:
                accepted += 1
                if accepted % CANCEL_EVERY == 0:
                    pool.submit(cancel, job_id, name)

    started = time.monotonic()
    for index in range(int(duration * rate)):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        pool.submit(submit, index)
    pool.shutdown(wait=True)


# --- the verdict ----------------------------------------------------------------------------------------------------


def portal_rows(names: list[str]) -> list[dict]:
    from django.db import connection

    from jobs.models import Job

    try:
        return list(
            Job.objects.filter(team__slug=TEAM, name__in=names).values(
                "pk", "name", "state", "cluster_created_at", "last_error"
            )
        )
    finally:
        connection.close()


def outbox_pending() -> int:
    from django.db import connection

    from portal.models import OutboxMessage

    try:
        return OutboxMessage.objects.filter(sent_at__isnull=True).count()
    finally:
        connection.close()


def settled(burst: Burst, recorder: ClusterRecorder) -> tuple[bool, dict]:
    """Whether the cluster matches the database for this burst's jobs (the convergence condition)."""
    accepted = [o for o in burst.outcomes if o.kind == "submit" and o.job_id]
    rows = {row["pk"]: row for row in portal_rows([o.name for o in burst.outcomes if o.kind == "submit"])}
    missing, leftover = [], []
    with recorder.lock:
        jobs = dict(recorder.jobs)
    for outcome in accepted:
        row = rows.get(outcome.job_id)
        job = jobs.get(outcome.job_id)
        exists = job is not None and not (job.get("metadata") or {}).get("deletionTimestamp")
        if row is None or (row["state"] != "cancelled" and not exists and row["state"] != "failed"):
            missing.append(outcome.job_id)
        if row is not None and row["state"] == "cancelled" and exists:
            leftover.append(outcome.job_id)
    pending = outbox_pending()
    return not missing and not leftover and pending == 0, {
        "missing": missing,
        "leftover": leftover,
        "outbox_pending": pending,
    }


def final_everywhere(burst: Burst, recorder: ClusterRecorder) -> bool:
    """Every job of the burst is final in the portal and every one of its pods has stopped in the cluster."""
    names = [o.name for o in burst.outcomes if o.kind == "submit"]
    rows = portal_rows(names)
    if any(row["state"] not in ("succeeded", "failed", "cancelled") for row in rows):
        return False
    ids = {row["pk"] for row in rows}
    with recorder.lock:
        pods = [p for p in recorder.pods.values() if p.job_id in ids]
    return all(p.gone or p.phase in ("Succeeded", "Failed") for p in pods)


def usage_comparison(burst: Burst, recorder: ClusterRecorder) -> dict:
    from django.db import connection

    from billing.models import UsageInterval

    ids = {row["pk"] for row in portal_rows([o.name for o in burst.outcomes if o.kind == "submit"])}
    with recorder.lock:
        cluster = {
            (p.uid, p.gpus, p.scheduled_at, p.finished_at)
            for p in recorder.pods.values()
            if p.job_id in ids and p.scheduled_at is not None and p.gpus > 0
        }
    try:
        portal = set(
            UsageInterval.objects.filter(job_id__in=ids).values_list("pod_uid", "gpus", "started_at", "ended_at")
        )
    finally:
        connection.close()

    def gpu_seconds(rows) -> float:
        return sum(gpus * ((end - start).total_seconds() if end and start else 0) for _, gpus, start, end in rows)

    differ = sorted(cluster ^ portal, key=str)
    return {
        "exact": not differ,
        "intervals_portal": len(portal),
        "intervals_cluster": len(cluster),
        "gpu_seconds_portal": round(gpu_seconds(portal), 3),
        "gpu_seconds_cluster": round(gpu_seconds(cluster), 3),
        "differences": [[str(v) for v in row] for row in differ[:6]],
    }


def resent_by_convergence(job_ids: list[int]) -> int:
    """Jobs whose submission message was sent more than once (the first time at commit, then by convergence)."""
    from django.db import connection
    from django.db.models import Count

    from portal.models import OutboxMessage

    try:
        sends = (
            OutboxMessage.objects.filter(task="jobs.submit_job")
            .values("args")
            .annotate(n=Count("pk"))
            .filter(n__gt=1)
            .values_list("args", flat=True)
        )
        return sum(1 for args in sends if args and args[0] in set(job_ids))
    finally:
        connection.close()


def verdict(burst: Burst, recorder: ClusterRecorder) -> dict:
    submits = [o for o in burst.outcomes if o.kind == "submit"]
    cancels = [o for o in burst.outcomes if o.kind == "cancel"]
    rows = portal_rows([o.name for o in submits])
    by_name: dict[str, list[dict]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    accepted = [o for o in submits if o.job_id]
    errors = [o for o in submits if not o.job_id]
    with recorder.lock:
        job_uids = {k: set(v) for k, v in recorder.job_uids.items()}
        pods_per_job: dict[int, set[str]] = {}
        for pod in recorder.pods.values():
            pods_per_job.setdefault(pod.job_id, set()).add(pod.uid)
        running = {
            p.job_id
            for p in recorder.pods.values()
            if not p.gone and not p.deleting and p.phase in ("Pending", "Running")
        }
        jobs = dict(recorder.jobs)
    state = {row["pk"]: row["state"] for row in rows}
    lost = [
        o.job_id
        for o in accepted
        if o.job_id not in state or (state[o.job_id] != "cancelled" and o.job_id not in job_uids)
    ]
    phantom_submits = [o.name for o in errors if o.name in by_name]
    phantom_cancels = [o.job_id for o in cancels if not 200 <= o.status < 300 and state.get(o.job_id) == "cancelled"]
    duplicated = [name for name, found in by_name.items() if len(found) > 1]
    duplicated += [f"job {k}: {len(v)} Jobs" for k, v in job_uids.items() if k in state and len(v) > 1]
    duplicated += [f"job {k}: {len(v)} pods" for k, v in pods_per_job.items() if k in state and len(v) > 1]
    cancelled_running = [
        job_id
        for job_id, job_state in state.items()
        if job_state == "cancelled"
        and (job_id in running or (jobs.get(job_id) and not jobs[job_id]["metadata"].get("deletionTimestamp")))
    ]
    statuses: dict[str, int] = {}
    for o in submits + cancels:
        statuses[f"{o.kind} {o.status or 'no answer'}"] = statuses.get(f"{o.kind} {o.status or 'no answer'}", 0) + 1
    return {
        "submitted": len(submits),
        "accepted": len(accepted),
        "answers": dict(sorted(statuses.items())),
        "rejected_5xx": sum(1 for o in submits + cancels if o.status >= 500),
        "rejected_5xx_without_retry_after": sum(1 for o in submits + cancels if o.status >= 500 and not o.retry_after),
        "resent_by_convergence": resent_by_convergence(list(state)),
        "connection_errors": sum(1 for o in submits + cancels if o.status == 0),
        "other_errors": sorted({o.status for o in submits + cancels if 300 <= o.status < 500}),
        "cancels": len(cancels),
        "cancels_accepted": sum(1 for o in cancels if 200 <= o.status < 300),
        "failed_by_portal": sum(1 for row in rows if row["state"] == "failed"),
        "lost": len(lost),
        "phantom": len(phantom_submits) + len(phantom_cancels),
        "duplicated": len(duplicated),
        "cancelled_but_running": len(cancelled_running),
        "details": {
            "lost": lost,
            "phantom": phantom_submits + [f"cancel {j}" for j in phantom_cancels],
            "duplicated": duplicated,
            "cancelled_but_running": cancelled_running,
        },
    }


# --- one fault ------------------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args):
        self.args = args
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.logs = STATE_DIR / "logs"
        if self.logs.exists():
            shutil.rmtree(self.logs)
        self.logs.mkdir(parents=True)
        self.postgres = Postgres()
        self.redis = Redis(STATE_DIR / "redis")
        self.cluster = None
        self.portal: Portal | None = None
        self.recorder: ClusterRecorder | None = None
        self.api: Api | None = None
        self.notes: dict = {}

    def setup(self) -> None:
        from devcluster import build, launcher

        log(f"PostgreSQL cluster {PG_CLUSTER} on port {self.postgres.port}")
        self.postgres.create()
        if (STATE_DIR / "redis").exists():
            shutil.rmtree(STATE_DIR / "redis")
        log(f"Redis (append-only) on port {self.redis.port}")
        self.redis.start()
        build.ensure_built(log)
        self.cluster = launcher.Cluster(CLUSTER_DIR, progress=log)
        self.cluster.down()
        self.cluster.up()
        env = {
            **os.environ,
            "DATABASE_URL": self.postgres.url,
            "REDIS_URL": self.redis.url,
            "KUBECONFIG": str(self.cluster.kubeconfig_path),
            "DJANGO_SETTINGS_MODULE": "portal.settings.dev",
            "PROMETHEUS_URL": "",
            "DJANGO_LOG_LEVEL": "INFO",
            # One user submits the whole burst: the API's per-user rate limits (429) are not what is measured here.
            "RESERVOIR_WRITE_RATE": "",
            "RESERVOIR_SUBMIT_RATE": "",
        }
        os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "KUBECONFIG", "DJANGO_SETTINGS_MODULE")})
        run = {"cwd": REPO_ROOT, "env": env, "check": True, "stdout": subprocess.DEVNULL}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], **run)  # noqa: S603
        subprocess.run([sys.executable, "manage.py", "seed_demo"], **run)  # noqa: S603
        import django

        django.setup()
        token = self._seed_team()
        self.portal = Portal(env, self.logs)
        for name in ("web", "worker", "beat", "outbox", "sync"):
            self.portal.start(name)
        self.api = Api(self.portal.web_port, token)
        from django.conf import settings

        namespace = f"{settings.TEAM_NAMESPACE_PREFIX}{TEAM}"
        self.recorder = ClusterRecorder(namespace)
        self.recorder.start()
        # The first fault must not strike before the team can run jobs at all (on a loaded machine the worker may
        # still be starting): its namespace with the ServiceAccount pods need, and its Kueue LocalQueue.
        from cluster import client as kube
        from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION
        from cluster.manifests import LOCAL_QUEUE_NAME

        wait(lambda: kube.core().read_namespaced_service_account("default", namespace), timeout=180, what=namespace)
        wait(
            lambda: kube.custom_objects().get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", LOCAL_QUEUE_NAME
            ),
            timeout=180,
            what=f"the LocalQueue of {namespace}",
        )
        time.sleep(3)  # the sync's first list, the worker ready

    def _seed_team(self) -> str:
        from django.db import connection

        from pools import services as pool_services
        from pools.models import Pool
        from portal import services
        from portal.choices import Role
        from portal.models import Membership, Team, User

        admin = User.objects.get(username="admin")
        team, _ = Team.objects.get_or_create(slug=TEAM, defaults={"name": "Fault bench"})
        user, _ = User.objects.get_or_create(username="faults-bench")
        Membership.objects.get_or_create(team=team, user=user, defaults={"role": Role.RESEARCHER})
        pool = Pool.objects.get(slug=POOL)
        pool_services.set_quota(team=team, pool=pool, max_gpus=self.args.quota, user=admin)
        _token, secret = services.create_token(owner=user, name="fault bench", user=admin)
        connection.close()
        return secret

    def kueue_running(self) -> bool:
        return any(record.name == "kueue" for record in self.cluster.records())

    def inject(self, fault: str) -> float:
        """Make `fault` happen, bring the service back; returns the monotonic time it was back."""
        portal = self.portal
        if fault in ("worker", "sync"):
            # Killed, then started again by its supervisor a second later (as under `make dev`).
            worker_log = self.logs / "worker.log"
            readies = worker_log.read_text().count(" ready.")
            if fault == "worker":
                self.notes["killed_mid_task"] = self._kill_worker_mid_task(worker_log)
                wait(lambda: worker_log.read_text().count(" ready.") > readies, timeout=60, what="the worker")
            else:
                restarts = portal.restarts("sync")
                portal.crash("sync")
                wait(lambda: portal.restarts("sync") > restarts, timeout=30, what="the sync to be restarted")
                time.sleep(1.5)  # the supervisor's pause, then the process starts
        elif fault == "redis":
            self.redis.stop()
            time.sleep(OUTAGE)
            self.redis.start()
        elif fault == "redis-wipe":
            # The worker stalls, so messages pile up in Redis; then Redis restarts with its data gone, as a Redis
            # without persistence would: every queued message (submits, deletes, retries) is lost.
            worker = self.portal.processes["worker"]
            os.killpg(worker.pid, signal.SIGSTOP)
            time.sleep(OUTAGE)
            self.notes["messages_wiped"] = sum(
                int(subprocess.run(["redis-cli", "-p", str(self.redis.port), "llen", q], capture_output=True).stdout)
                for q in ("cluster", "default", "billing")
            )
            self.redis.stop()
            shutil.rmtree(self.redis.directory)
            self.redis.start()
            os.killpg(worker.pid, signal.SIGCONT)
        elif fault == "postgres":
            self.postgres.stop()
            time.sleep(OUTAGE)
            self.postgres.start()
        elif fault in ("apiserver", "kueue"):
            # The API server's graceful stop alone takes from 3 s (an idle machine) to 47 s (a loaded one);
            # --apiserver-down keeps it down longer, so that the portal's watches back off as on a loaded machine.
            down_for = self.args.apiserver_down if fault == "apiserver" else 0.0
            self.cluster.restart_component("kube-apiserver" if fault == "apiserver" else "kueue", down_for=down_for)
        return time.monotonic()

    def _kill_worker_mid_task(self, worker_log: Path) -> str:
        """SIGKILL the worker right after it received a submit task (within its run); returns the task's id."""
        import re

        offset = worker_log.stat().st_size
        pattern = re.compile(r"Task jobs\.submit_job\[([0-9a-f-]+)\] received")
        deadline = time.monotonic() + 10
        task_id = ""
        while time.monotonic() < deadline and not task_id:
            with worker_log.open() as handle:
                handle.seek(offset)
                found = pattern.search(handle.read())
            task_id = found.group(1) if found else ""
            if not task_id:
                time.sleep(0.01)
        self.portal.crash("worker")
        finished = task_id and re.search(rf"{task_id}\] (succeeded|retry|raised)", worker_log.read_text())
        return f"{task_id} ({'had finished' if finished else 'was running'})" if task_id else "no task seen in 10 s"

    def _sample_outbox(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                self.notes["outbox_peak_pending"] = max(self.notes.get("outbox_peak_pending", 0), outbox_pending())
            stop.wait(0.5)

    def run_fault(self, fault: str) -> dict:
        if fault == "kueue" and not self.kueue_running():
            return {"skipped": "the devcluster runs no kueue component (Kueue is not the admission engine yet)"}
        log(f"fault {fault}: burst of {self.args.burst:.0f}s at {self.args.rate}/s, fault at {self.args.fault_at}s")
        burst = Burst(fault)
        self.notes = {}
        sampling = threading.Event()
        sampler = threading.Thread(target=self._sample_outbox, args=(sampling,), daemon=True)
        sampler.start()
        restarts_before = {name: self.portal.restarts(name) for name in self.portal.commands}
        load = threading.Thread(
            target=run_burst,
            args=(self.api, burst),
            kwargs={"duration": self.args.burst, "rate": self.args.rate, "runs_for": self.args.runs_for},
        )
        load.start()
        time.sleep(self.args.fault_at)
        fault_started = time.monotonic()
        back = self.inject(fault)
        log(f"fault {fault}: service back after {back - fault_started:.1f}s")
        load.join()
        burst_ended = time.monotonic()  # every request of the burst has been answered
        sampling.set()
        converged_at, last = None, {}
        deadline = time.monotonic() + self.args.converge_timeout
        while time.monotonic() < deadline:
            try:
                ok, last = settled(burst, self.recorder)
            except Exception as error:  # noqa: BLE001 - the database may still be coming back
                ok, last = False, {"error": str(error)[:200]}
            if ok:
                converged_at = time.monotonic()
                break
            time.sleep(0.5)
        converge_s = round(max(0.0, converged_at - back), 1) if converged_at else None
        log(f"fault {fault}: converged {converge_s}s after the service came back ({last})")
        with contextlib.suppress(RuntimeError):
            wait(lambda: final_everywhere(burst, self.recorder), timeout=180, what="every job to finish")
        time.sleep(3)  # the sync writes the last intervals
        result = verdict(burst, self.recorder)
        result.update(
            {
                "outage_s": round(back - fault_started, 1),
                "converge_s": converge_s,
                "settled_after_last_answer_s": round(max(0.0, converged_at - burst_ended), 1) if converged_at else None,
                "not_converged": None if converged_at else last,
                "usage": usage_comparison(burst, self.recorder),
                # Processes that exited during the fault and were started again by their supervisor.
                "process_restarts": {
                    name: self.portal.restarts(name) - restarts_before[name]
                    for name in self.portal.commands
                    if self.portal.restarts(name) > restarts_before[name]
                },
                **self.notes,
            }
        )
        log(f"fault {fault}: {json.dumps({k: v for k, v in result.items() if k != 'details'})}")
        return result

    def teardown(self) -> None:
        if self.recorder is not None:
            self.recorder.stop.set()
        if self.portal is not None:
            self.portal.stop_all()
        if self.args.keep:
            log(f"kept: PostgreSQL {PG_CLUSTER} port {self.postgres.port}, Redis port {self.redis.port}, {CLUSTER_DIR}")
            return
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        self.redis.stop()
        self.postgres.drop()
        if self.cluster is not None:
            self.cluster.down()


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(FAULTS), help="comma-separated faults, in order")
    parser.add_argument("--burst", type=float, default=20.0, help="seconds of submissions per fault")
    parser.add_argument("--rate", type=float, default=1.5, help="submissions per second")
    parser.add_argument("--fault-at", type=float, default=4.0, help="seconds into the burst when the fault happens")
    parser.add_argument("--runs-for", default="10s", help="how long each job's pod runs (KWOK delay)")
    parser.add_argument("--quota", type=int, default=32, help="the bench team's GPUs in the reserved pool")
    parser.add_argument("--converge-timeout", type=float, default=150.0)
    parser.add_argument(
        "--apiserver-down", type=float, default=0.0, help="seconds the API server stays down after its graceful stop"
    )
    parser.add_argument("--keep", action="store_true", help="leave the services running afterwards")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    faults = [f for f in args.only.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise SystemExit(f"unknown faults: {sorted(unknown)}; choose from {FAULTS}")
    bench = Bench(args)
    results: dict[str, dict] = {}
    started = time.monotonic()
    try:
        bench.setup()
        for fault in faults:
            results[fault] = bench.run_fault(fault)
    finally:
        bench.teardown()
    measured = {k: v for k, v in results.items() if "skipped" not in v}
    met = all(
        r["lost"] == 0
        and r["phantom"] == 0
        and r["duplicated"] == 0
        and r["cancelled_but_running"] == 0
        and r["converge_s"] is not None
        and r["converge_s"] < TARGETS["converge_s"]
        and r["usage"]["exact"]
        for r in measured.values()
    )
    summary = {
        "benchmark": "faults",
        "burst_s": args.burst,
        "rate_per_s": args.rate,
        "cancel_every": CANCEL_EVERY,
        "outage_s": OUTAGE,
        "job_runs_for": args.runs_for,
        "apiserver_down_s": args.apiserver_down,
        "cpus": os.cpu_count(),
        "wall_s": round(time.monotonic() - started, 1),
        "targets": TARGETS,
        "all_targets_met": met,
        "faults": results,
    }
    print(json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
