"""Benchmark: the REST API under 50 concurrent clients on loopback.

Builds its own database (`<DATABASE_URL name>_apibench`, bench/benchdb.py) with TEAMS teams, 3 pools, a quota per
team and pool, and JOBS jobs (about a third running), starts gunicorn on 127.0.0.1 with the production code path
(token auth, tasks sent to a Redis broker database of their own, which is emptied afterwards), then measures, each
for DURATION seconds with CLIENTS concurrent keep-alive clients sending back to back (closed loop):

- jobs_running: GET /api/v1/jobs/?state=running as a platform admin (a page of 50 out of all running jobs);
- quota_updates: PATCH /api/v1/quotas/<id>/ as a platform admin, alternating values, spread over every quota.

Latencies are measured by the clients (request sent to body read). The JSON summary is the last line printed.

    .venv/bin/python bench/api.py                    # 50 clients, 10,000 jobs, 20 s per scenario
    .venv/bin/python bench/api.py --duration 5       # a quick check
    .venv/bin/python bench/api.py --clients 2 --jobs 50 --teams 2 --duration 0.5 --warmup 0.2 --workers 1 \
        --threads 2                                  # the smoke size (tests/bench/)

Tasks the API queues go to BENCH_REDIS_URL (default redis://127.0.0.1:6379/14), which is emptied afterwards: give
it a Redis database nobody else uses.
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import bench_database  # noqa: E402
from bench.harness import NUMBER, Run, free_port  # noqa: E402

TARGET_P95_MS = 100.0
SCENARIOS = ("jobs_running", "quota_updates")
# The figures the README quotes: requests a second, p50 and p95 of each scenario.
SUMMARY_KEYS = {
    **{f"{scenario}.{figure}": NUMBER for scenario in SCENARIOS for figure in ("rps", "p50_ms", "p95_ms", "p99_ms")},
    **{f"{scenario}.requests": int for scenario in SCENARIOS},
    **{f"{scenario}.errors": dict for scenario in SCENARIOS},
    "clients": int,
    "jobs": int,
    "gunicorn.workers": int,
    "gunicorn.threads": int,
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per scenario")
    parser.add_argument("--warmup", type=float, default=1.5, help="seconds of warm-up before each scenario")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    return parser.parse_args()


def seed(*, jobs: int, teams: int) -> dict:
    """Fresh rows for the benchmark (previous bench rows are removed first). Returns the admin token and quotas."""
    from django.db import connection, transaction

    from jobs.models import Job
    from pools.models import Pool, Quota
    from portal import services
    from portal.models import Team, User

    with transaction.atomic():
        Job.objects.all().delete()
        Quota.objects.all().delete()
        # The audit table refuses DELETE (append-only trigger); the benchmark's own database is emptied instead.
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE portal_auditentry")
        Team.objects.filter(slug__startswith="bench-").delete()
        Pool.objects.filter(slug__startswith="bench-").delete()
        admin, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_platform_admin": True})
        researcher, _ = User.objects.get_or_create(username="bench-researcher")
        team_rows = Team.objects.bulk_create(
            [Team(slug=f"bench-{n}", name=f"Bench {n}") for n in range(teams)], batch_size=500
        )
        pool_rows = [
            Pool.objects.create(
                slug=f"bench-{kind}",
                name=f"Bench {kind}",
                kind=kind,
                gpu_model="NVIDIA-A800-SXM4-80GB",
                node_selector={"node-role": f"bench-{kind}"},
                contracted_gpus=512 if kind == "reserved" else None,
            )
            for kind in ("reserved", "elastic", "shared")
        ]
        quotas = Quota.objects.bulk_create(
            [Quota(team=team, pool=pool, max_gpus=1000) for team in team_rows for pool in pool_rows]
        )
        states = ["running", "running", "running", "succeeded", "failed", "queued", "pending", "cancelled", "admitted"]
        Job.objects.bulk_create(
            [
                Job(
                    team=team_rows[n % len(team_rows)],
                    pool=pool_rows[n % len(pool_rows)],
                    submitted_by=researcher,
                    name=f"bench-job-{n}",
                    image="registry.example.com/bench/train:1.0",
                    command=["python", "train.py"],
                    gpus=1 + n % 4,
                    state=states[n % len(states)],
                )
                for n in range(jobs)
            ],
            batch_size=2000,
        )
        _token, secret = services.create_token(owner=admin, name="bench", user=admin)
    running = Job.objects.filter(state="running").count()
    return {"token": secret, "quota_ids": [q.pk for q in quotas], "running_jobs": running}


def wait_until_up(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not answer /healthz in time")


def run_clients(*, port: int, clients: int, duration: float, make_request) -> dict:
    """`clients` threads, each with one keep-alive connection, send requests back to back for `duration` s."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        mine_errors: dict[str, int] = {}
        count = 0
        start.wait()
        while time.monotonic() < stop_at[0]:
            method, path, body, headers = make_request(index, count)
            count += 1
            began = time.perf_counter()
            try:
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as error:
                status = type(error).__name__
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            elapsed = time.perf_counter() - began
            if status in (200, 201, 202):
                mine.append(elapsed)
            else:
                mine_errors[str(status)] = mine_errors.get(str(status), 0) + 1
        connection.close()
        with lock:
            latencies.extend(mine)
            for key, value in mine_errors.items():
                errors[key] = errors.get(key, 0) + value

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.monotonic() + duration
    began = time.monotonic()
    start.wait()
    for thread in threads:
        thread.join(timeout=duration + 60)
    wall = time.monotonic() - began
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1) if ordered else 0.0

    return {
        "requests": len(ordered),
        "errors": errors,
        "rps": round(len(ordered) / wall, 1),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 1) if ordered else 0.0,
        "meets_p95_target": pct(0.95) < TARGET_P95_MS,
    }


def main() -> None:
    args = parse_args()
    run = Run("api")
    database_url = bench_database("apibench")
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
    os.environ.update(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "portal.settings.dev",
            "DJANGO_DEBUG": "0",
            "DJANGO_LOG_LEVEL": "WARNING",
            # The benchmark measures throughput: the API's per-user write limits would cap it at a few a second.
            "RESERVOIR_WRITE_RATE": "",
            "RESERVOIR_SUBMIT_RATE": "",
        }
    )
    import django

    django.setup()
    t0 = time.monotonic()
    world = seed(jobs=args.jobs, teams=args.teams)
    seed_seconds = round(time.monotonic() - t0, 1)
    from django.db import connections

    connections.close_all()

    port = free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "portal.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--worker-class",
            "gthread",
            "--workers",
            str(args.workers),
            "--threads",
            str(args.threads),
            "--keep-alive",
            "30",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        start_new_session=True,
    )
    results = {}
    try:
        wait_until_up(port)
        auth = {"Authorization": f"Bearer {world['token']}", "Accept": "application/json"}

        def jobs_running(index, count):
            return "GET", "/api/v1/jobs/?state=running", None, auth

        quota_ids = world["quota_ids"]
        patch_headers = {**auth, "Content-Type": "application/json"}

        def quota_update(index, count):
            quota_id = quota_ids[(index + count * args.clients) % len(quota_ids)]
            body = json.dumps({"max_gpus": 1000 + (count % 2)})  # above what the jobs use: always accepted
            return "PATCH", f"/api/v1/quotas/{quota_id}/", body, patch_headers

        for scenario, make in zip(SCENARIOS, (jobs_running, quota_update), strict=True):
            # A short warm-up so that connections, caches and workers are up before measuring.
            run_clients(port=port, clients=min(args.clients, 8), duration=args.warmup, make_request=make)
            results[scenario] = run_clients(port=port, clients=args.clients, duration=args.duration, make_request=make)
            print(scenario, json.dumps(results[scenario]), flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        try:
            import redis

            redis.Redis.from_url(redis_url).flushdb()  # the reconcile tasks nobody consumes here
        except Exception as error:  # noqa: BLE001 - cleanup is best effort, and says so
            print(f"could not empty {redis_url}: {error}", file=sys.stderr)

    summary = {
        "clients": args.clients,
        "jobs": args.jobs,
        "running_jobs": world["running_jobs"],
        "quotas": len(world["quota_ids"]),
        "duration_s": args.duration,
        "gunicorn": {"workers": args.workers, "threads": args.threads, "worker_class": "gthread"},
        "seed_s": seed_seconds,
        "target_p95_ms": TARGET_P95_MS,
        **results,
    }
    run.finish(summary)


if __name__ == "__main__":
    main()
