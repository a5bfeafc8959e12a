"""Fault benchmark: bursts of submissions and cancels through the API while, one at a time, a service fails.

Starts everything of its own, on free loopback ports, and never touches the shared services: a PostgreSQL cluster
(`pg_createcluster <version> benchfaults`), a Redis with append-only persistence (as `make dev` runs it), a local
control plane (.state/devcluster-bench-faults), and the portal's processes as `make dev` starts them — web
(gunicorn), the two Celery workers (the cluster's queue in a thread pool, and the others), Celery beat, the outbox
dispatcher and the cluster sync.

Faults, one at a time, each during its own burst (submissions at a steady rate, every CANCEL_EVERY-th accepted
job cancelled a moment later): worker SIGKILL (the cluster worker, right after it received a submit task, so that
one is cut off mid-run with its message unacknowledged), Redis restart, `redis-wipe` (the workers stall with
SIGSTOP so that messages pile up in Redis, then Redis restarts with its data gone, as without persistence: every
queued submit, delete and retry is lost), PostgreSQL restart, sync SIGKILL, apiserver restart, and Kueue restart
when the devcluster runs a `kueue` component (skipped with a note otherwise). A killed process is started again by its
supervisor (scripts/supervise.sh, as under `make dev`) a second later; a stopped Redis or PostgreSQL is started
again after --outage seconds (5).

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
The last line printed is the JSON summary. The smoke tests (tests/bench/) run every fault with ``--shared-cluster
--burst 4 --rate 1 --fault-at 1 --runs-for 1s --outage 1``.

The services it runs and breaks are in bench/faults_services.py, the load in bench/faults_load.py, what it finds
after each burst in bench/faults_verdict.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench import harness, pipeline  # noqa: E402
from bench.faults_load import CANCEL_EVERY, POOL, TEAM, Api, Burst, run_burst  # noqa: E402
from bench.faults_services import PG_CLUSTER, Portal, Postgres, Redis  # noqa: E402
from bench.faults_verdict import ClusterRecorder, final_everywhere, outbox_pending, settled, usage_comparison, verdict  # noqa: E402
from bench.harness import NUMBER, NUMBER_OR_NONE, Run  # noqa: E402
from bench.harness import wait_for as wait  # noqa: E402

STATE_DIR = harness.STATE_ROOT / "bench-faults"
TARGETS = {"lost": 0, "phantom": 0, "duplicated": 0, "cancelled_but_running": 0, "converge_s": 60.0}
FAULTS = ("worker", "redis", "redis-wipe", "postgres", "sync", "apiserver", "kueue")
# The figures docs/benchmarks.md's Faults table quotes for each fault: the outage, the answers, lost / phantom /
# duplicated / cancelled but running, the time to converge (None: it did not), the usage intervals of portal and
# cluster.
SUMMARY_KEYS = {
    **{
        f"faults.*.{path}": kind
        for path, kind in {
            "outage_s": NUMBER,
            "answers": dict,
            "accepted": int,
            "lost": int,
            "phantom": int,
            "duplicated": int,
            "cancelled_but_running": int,
            "converge_s": NUMBER_OR_NONE,
            "settled_after_last_answer_s": NUMBER_OR_NONE,
            "resent_by_convergence": int,
            "usage.exact": bool,
            "usage.intervals_portal": int,
            "usage.intervals_cluster": int,
            "usage.gpu_seconds_portal": NUMBER,
            "usage.gpu_seconds_cluster": NUMBER,
        }.items()
    },
    "all_targets_met": bool,
    "wall_s": NUMBER,
}
log = harness.logger("faults")


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
        log(f"PostgreSQL cluster {PG_CLUSTER} on port {self.postgres.port}")
        self.postgres.create()
        if (STATE_DIR / "redis").exists():
            shutil.rmtree(STATE_DIR / "redis")
        log(f"Redis (append-only) on port {self.redis.port}")
        self.redis.start()
        self.cluster = harness.start_cluster(self.args, log=log)
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
        if self.args.shared_cluster:
            pipeline.clear_earlier_runs([TEAM], log)
        token = self._seed_team()
        self.portal = Portal(env, self.logs)
        for name in ("web", "worker", "cluster-worker", "beat", "outbox", "sync"):
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
            worker_log = self.logs / "cluster-worker.log"  # the submit tasks' worker
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
            time.sleep(self.args.outage)
            self.redis.start()
        elif fault == "redis-wipe":
            # The workers stall, so messages pile up in Redis; then Redis restarts with its data gone, as a Redis
            # without persistence would: every queued message (submits, deletes, retries) is lost.
            workers = [self.portal.processes[name] for name in ("cluster-worker", "worker")]
            for worker in workers:
                os.killpg(worker.pid, signal.SIGSTOP)
            time.sleep(self.args.outage)
            self.notes["messages_wiped"] = sum(
                int(subprocess.run(["redis-cli", "-p", str(self.redis.port), "llen", q], capture_output=True).stdout)
                for q in ("cluster", "default", "billing")
            )
            self.redis.stop()
            shutil.rmtree(self.redis.directory)
            self.redis.start()
            for worker in workers:
                os.killpg(worker.pid, signal.SIGCONT)
        elif fault == "postgres":
            self.postgres.stop()
            time.sleep(self.args.outage)
            self.postgres.start()
        elif fault in ("apiserver", "kueue"):
            # The API server's graceful stop alone takes from 3 s (an idle machine) to 47 s (a loaded one);
            # --apiserver-down keeps it down longer, so that the portal's watches back off as on a loaded machine.
            down_for = self.args.apiserver_down if fault == "apiserver" else 0.0
            self.cluster.restart_component("kube-apiserver" if fault == "apiserver" else "kueue", down_for=down_for)
        return time.monotonic()

    def _kill_worker_mid_task(self, worker_log: Path) -> str:
        """SIGKILL the cluster worker right after it received a submit task (within its run); returns the task's
        id."""
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
        self.portal.crash("cluster-worker")
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
        """Stop everything the benchmark started, each step whatever became of the steps before it (one that fails
        is logged, and the first failure raised at the end): a step left out leaves services running."""
        if self.recorder is not None:
            self.recorder.stop.set()
        steps = []
        if self.portal is not None:
            steps.append(("the portal's processes", self.portal.stop_all))
        if self.args.keep:
            kept = f"PostgreSQL {PG_CLUSTER} port {self.postgres.port}, Redis port {self.redis.port}"
            log(f"kept: {kept}, the cluster in {self.args.state_dir}")
        else:
            steps += [
                ("the database connections", close_connections),
                ("Redis", self.redis.stop),
                ("PostgreSQL", self.postgres.drop),
                ("the cluster", lambda: harness.stop_cluster(self.args, self.cluster)),
            ]
        run_all(steps)


def close_connections() -> None:
    """Close this process's database connections; their database may be the one a fault has broken."""
    with contextlib.suppress(Exception):
        from django.db import connections

        connections.close_all()


def run_all(steps) -> None:
    """Call every (what, step) in order; a step that raises is logged and the next ones still run; the first error
    is raised once all have run."""
    first = None
    for what, step in steps:
        try:
            step()
        except Exception as error:  # noqa: BLE001 - every step must run; the first error is raised below
            log(f"stopping {what} failed: {error!r}")
            first = first or error
    if first is not None:
        raise first


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
    parser.add_argument("--outage", type=float, default=5.0, help="seconds a stopped Redis or PostgreSQL stays down")
    parser.add_argument("--keep", action="store_true", help="leave the services running afterwards")
    parser.add_argument(
        "--state-dir", type=Path, default=harness.STATE_ROOT / "devcluster-bench-faults", help="the cluster's state dir"
    )
    parser.add_argument(
        "--shared-cluster",
        action="store_true",
        help="run on the cluster already up in --state-dir (started if it is not) and leave it running (the smoke "
        "tests; its API server and Kueue are restarted by those faults)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    run = Run("faults")
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
        "burst_s": args.burst,
        "rate_per_s": args.rate,
        "cancel_every": CANCEL_EVERY,
        "outage_s": args.outage,
        "job_runs_for": args.runs_for,
        "apiserver_down_s": args.apiserver_down,
        "shared_cluster": args.shared_cluster,
        "wall_s": round(time.monotonic() - started, 1),
        "targets": TARGETS,
        "all_targets_met": met,
        "faults": results,
    }
    run.finish(summary)


if __name__ == "__main__":
    main()
