"""Benchmark: the REST API's CPU time per request against a floor measured in the same run, and the API under
closed-loop clients on loopback (issue 30: ratios to a floor are the targets, absolute figures are reported).

Builds its own database (`<DATABASE_URL name>_apibench`, bench/benchdb.py) with TEAMS teams, 3 pools, a quota per
team and pool, and JOBS jobs (about a third running), then measures two requests as a platform admin:

- jobs_list: GET /api/v1/jobs/?state=running (a page of 50 out of all running jobs);
- quota_update: PATCH /api/v1/quotas/<id>/, alternating values, spread over every quota.

1. CPU time per request, in this process (bench/api_floor.py says how and why): the production WSGI application
   (every middleware, token authentication, DRF) against the floor — the same page read with one SQL query and
   serialised with the standard library's json; for the PATCH, one UPDATE and one audit INSERT — in alternating
   blocks, median block of each, and the ratio. Targets: both ratios <= 3. The floor's answer is checked against
   the API's first (`floor_equals_api`). Beside the quota change, the same PATCH refused by its validation (nothing
   written) against the same floor (`refused_cpu_ms`, `refused_cpu_ratio`): what the request costs before the change.
2. Load: gunicorn on 127.0.0.1 with the production code path (token auth, tasks sent to a Redis broker database of
   its own, which is emptied afterwards), for each of CLIENTS (8 and 50) concurrent keep-alive clients sending back
   to back for DURATION seconds: requests a second, p50 / p95 / p99 latency measured by the clients (request sent to
   body read), and the gunicorn processes' CPU time per request (psutil, the whole run of the scenario).

The JSON summary is the last line printed.

    .venv/bin/python bench/api.py                    # 8 and 50 clients, 10,000 jobs, 20 s per scenario
    .venv/bin/python bench/api.py --duration 5       # a quick check
    .venv/bin/python bench/api.py --profile          # also cProfile both requests in-process (to stderr)
    .venv/bin/python bench/api.py --clients 2 --jobs 50 --teams 2 --duration 0.5 --warmup 0.2 --workers 1 \
        --threads 2 --cpu-requests 3 --cpu-rounds 1  # the smoke size (tests/bench/)

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

from bench import api_floor  # noqa: E402
from bench.benchdb import bench_database  # noqa: E402
from bench.harness import NUMBER, NUMBER_OR_NONE, Run, free_port  # noqa: E402

TARGET_P95_MS = 100.0
TARGET_CPU_RATIO = 3.0
SCENARIOS = ("jobs_running", "quota_updates")
REQUESTS = ("jobs_list", "quota_update")
# The figures docs/benchmarks.md quotes: CPU per request of the floor and the real path and their ratio; requests a
# second and latencies of each scenario at each number of clients, and the server's CPU per request there.
SUMMARY_KEYS = {
    **{
        f"cpu_per_request.{request}.{figure}": NUMBER
        for request in REQUESTS
        for figure in ("floor_cpu_ms", "real_cpu_ms", "floor_wall_ms", "real_wall_ms", "queries")
    },
    **{f"cpu_per_request.{request}.cpu_ratio": NUMBER_OR_NONE for request in REQUESTS},
    # The quota change refused by its validation (nothing written), against the same floor: the request's frame.
    "cpu_per_request.quota_update.refused_cpu_ms": NUMBER,
    "cpu_per_request.quota_update.refused_cpu_ratio": NUMBER_OR_NONE,
    **{f"cpu_per_request.{request}.floor_equals_api": bool for request in REQUESTS},
    **{
        f"load.*.{scenario}.{figure}": NUMBER
        for scenario in SCENARIOS
        for figure in ("rps", "p50_ms", "p95_ms", "p99_ms", "server_cpu_ms_per_request")
    },
    **{f"load.*.{scenario}.requests": int for scenario in SCENARIOS},
    **{f"load.*.{scenario}.errors": dict for scenario in SCENARIOS},
    "clients": list,
    "jobs": int,
    "gunicorn.workers": int,
    "gunicorn.threads": int,
    "targets_met.jobs_list_cpu_ratio": bool,
    "targets_met.quota_update_cpu_ratio": bool,
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--clients", type=lambda text: [int(n) for n in text.split(",")], default=[8, 50], help="e.g. 8,50"
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per scenario")
    parser.add_argument("--warmup", type=float, default=1.5, help="seconds of warm-up before each scenario")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument("--cpu-requests", type=int, default=200, help="requests per block of the CPU comparison")
    parser.add_argument("--cpu-rounds", type=int, default=5, help="blocks of each path in the CPU comparison")
    parser.add_argument("--profile", action="store_true", help="cProfile both requests in-process, to stderr")
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
    return {
        "token": secret,
        "quota_ids": [q.pk for q in quotas],
        "running_jobs": running,
        "admin": (admin.pk, admin.username),
    }


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


def compare_cpu(args, world: dict, database_url: str) -> dict:
    """Part 1: CPU time per request of the real path and of its floor, in this process (bench/api_floor.py)."""
    from django.db import connection, connections
    from django.test.utils import CaptureQueriesContext

    from portal.wsgi import application

    port = 8000
    auth = {"Authorization": f"Bearer {world['token']}", "Accept": "application/json"}
    call = api_floor.WsgiCaller(application, port=port, headers=auth)
    floor_db = api_floor.floor_connection(database_url)
    base_url = f"http://127.0.0.1:{port}/api/v1/jobs/"
    quota_ids = world["quota_ids"]
    admin_id, admin_username = world["admin"]

    def real_list(index):
        status, _body = call("GET", "/api/v1/jobs/", "state=running")
        assert status == 200, status

    def floor_list(index):
        api_floor.floor_jobs_page(floor_db, state="running", base_url=base_url)

    def real_patch(index):
        body = json.dumps({"max_gpus": 1000 + index % 2}).encode()
        status, _body = call("PATCH", f"/api/v1/quotas/{quota_ids[index % len(quota_ids)]}/", body=body)
        assert status == 200, status

    def refused_patch(index):
        # The same request refused by its validation: token, middleware, DRF's dispatch, the quota's lookup and the
        # body's check, nothing written. What any quota change costs before it changes anything.
        status, _body = call("PATCH", f"/api/v1/quotas/{quota_ids[index % len(quota_ids)]}/", body=b'{"max_gpus": -1}')
        assert status == 400, status

    def floor_patch(index):
        api_floor.floor_quota_update(
            floor_db,
            quota_id=quota_ids[index % len(quota_ids)],
            max_gpus=1000 + index % 2,
            actor_id=admin_id,
            actor_username=admin_username,
        )

    def queries(request) -> int:
        with CaptureQueriesContext(connection) as captured:
            request(0)
        return sum(1 for query in captured.captured_queries if query["sql"] not in ("BEGIN", "COMMIT"))

    # The floor's answers hold what the API's do (the quota's GPUs in use, namespace and Kueue state aside).
    api_page = json.loads(call("GET", "/api/v1/jobs/", "state=running")[1])
    floor_page = json.loads(api_floor.floor_jobs_page(floor_db, state="running", base_url=base_url))
    quota_path = f"/api/v1/quotas/{quota_ids[0]}/"
    api_quota = json.loads(call("PATCH", quota_path, body=b'{"max_gpus": 1001}')[1])
    floor_quota = json.loads(
        api_floor.floor_quota_update(
            floor_db, quota_id=quota_ids[0], max_gpus=1001, actor_id=admin_id, actor_username=admin_username
        )
    )
    same_quota = all(api_quota[key] == floor_quota[key] for key in floor_quota if key != "updated_at")

    results = {}
    for name, floor, real, equal in (
        ("jobs_list", floor_list, real_list, api_page == floor_page),
        ("quota_update", floor_patch, real_patch, same_quota),
    ):
        results[name] = {
            **api_floor.compare(floor=floor, real=real, requests=args.cpu_requests, rounds=args.cpu_rounds),
            "queries": queries(real),
            "floor_equals_api": equal,
        }
        if name == "quota_update":
            refused = api_floor.compare(
                floor=floor, real=refused_patch, requests=args.cpu_requests, rounds=args.cpu_rounds
            )
            results[name]["refused_cpu_ms"] = refused["real_cpu_ms"]
            results[name]["refused_cpu_ratio"] = refused["cpu_ratio"]
        print(name, json.dumps(results[name]), flush=True)
        if args.profile:
            api_floor.profile(real, requests=args.cpu_requests, label=name)
    floor_db.close()
    connections.close_all()
    return results


def gunicorn_cpu_seconds(server) -> float:
    """CPU seconds (user + system) the gunicorn master and its workers have used so far."""
    import psutil

    total = 0.0
    master = psutil.Process(server.pid)
    for process in [master, *master.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


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
    cpu = compare_cpu(args, world, database_url)

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
    load: dict[str, dict] = {}
    try:
        wait_until_up(port)
        auth = {"Authorization": f"Bearer {world['token']}", "Accept": "application/json"}

        def jobs_running(index, count):
            return "GET", "/api/v1/jobs/?state=running", None, auth

        quota_ids = world["quota_ids"]
        patch_headers = {**auth, "Content-Type": "application/json"}

        for clients in args.clients:

            def quota_update(index, count, clients=clients):
                quota_id = quota_ids[(index + count * clients) % len(quota_ids)]
                body = json.dumps({"max_gpus": 1000 + (count % 2)})  # above what the jobs use: always accepted
                return "PATCH", f"/api/v1/quotas/{quota_id}/", body, patch_headers

            results = load.setdefault(str(clients), {})
            for scenario, make in zip(SCENARIOS, (jobs_running, quota_update), strict=True):
                # A short warm-up so that connections, caches and workers are up before measuring.
                run_clients(port=port, clients=min(clients, 8), duration=args.warmup, make_request=make)
                cpu_before = gunicorn_cpu_seconds(server)
                result = run_clients(port=port, clients=clients, duration=args.duration, make_request=make)
                served = result["requests"] + sum(result["errors"].values())
                result["server_cpu_ms_per_request"] = round(
                    (gunicorn_cpu_seconds(server) - cpu_before) * 1000 / max(served, 1), 2
                )
                results[scenario] = result
                print(f"{scenario} at {clients} clients", json.dumps(result), flush=True)
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

    def within(ratio) -> bool:
        return ratio is not None and ratio <= TARGET_CPU_RATIO

    summary = {
        "clients": args.clients,
        "jobs": args.jobs,
        "running_jobs": world["running_jobs"],
        "quotas": len(world["quota_ids"]),
        "duration_s": args.duration,
        "gunicorn": {"workers": args.workers, "threads": args.threads, "worker_class": "gthread"},
        "seed_s": seed_seconds,
        "cpu_per_request": cpu,
        "load": load,
        "targets": {"cpu_ratio": TARGET_CPU_RATIO, "p95_ms": TARGET_P95_MS},
        "targets_met": {
            "jobs_list_cpu_ratio": within(cpu["jobs_list"]["cpu_ratio"]),
            "quota_update_cpu_ratio": within(cpu["quota_update"]["cpu_ratio"]),
        },
    }
    run.finish(summary)


if __name__ == "__main__":
    main()
