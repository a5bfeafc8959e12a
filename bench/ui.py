"""Benchmark: server time of the busiest pages at full size — the pools dashboard, the pending view and the jobs list.

Builds its own database (`<DATABASE_URL name>_uibench`, bench/benchdb.py) and fills it through the models (bulk
creates: every column gets its model default): TEAMS teams, POOLS pools sharing NODES nodes of 8 GPUs (2 % NotReady),
PODS pods (most Running and bound, some holding no GPU, PENDING_PODS unschedulable with the scheduler's message, a
few finished), JOBS past jobs spread over a year plus QUEUED queued jobs. Two viewers: a researcher of two teams and a
platform admin (who sees every team's jobs).

Each page is requested in-process through Django's test client (URL routing, middleware, session, views, templates:
everything but the network), WARMUP times untimed, then REQUESTS times timed; queries per request are counted in a
separate request, and the bytes on the wire of one live refresh (the page's htmx poll, gzip accepted, headers
included) next to its size uncompressed. The JSON summary (p50, p95 in milliseconds, queries per request, refresh
bytes) is the last line printed.

    .venv/bin/python bench/ui.py                    # 1,000 nodes, 10,000 pods, 100,000 past jobs
    .venv/bin/python bench/ui.py --reuse            # keep the data of a previous run of the same size
    .venv/bin/python bench/ui.py --requests 20      # a quicker look
    .venv/bin/python bench/ui.py --teams 3 --pools 4 --nodes 8 --pods 40 --pending-pods 4 --jobs 50 --queued 5 \
        --requests 2 --warmup 1                     # the smoke size (tests/bench/)
"""

import argparse
import gzip
import html
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import bench_database  # noqa: E402
from bench.harness import NUMBER, Run, percentile  # noqa: E402

TARGET_P95_MS = 150
TARGET_REFRESH_BYTES = 50_000  # a live refresh at full size, on the wire (issue 16)
PAGES = {
    "pools_dashboard": "/pools/",
    "pending": "/jobs/pending/",
    "jobs_list": "/jobs/",
    "jobs_list_filtered": "/jobs/?state=failed&pool=pool-2",
}
VIEWERS = ("researcher", "admin")
# The figures the README quotes: p95 and queries of each page for each viewer, the bytes of a live refresh.
SUMMARY_KEYS = {
    **{f"pages.{page}[{viewer}].p95_ms": NUMBER for page in PAGES for viewer in VIEWERS},
    "pages.*.p50_ms": NUMBER,
    "pages.*.queries": int,
    "pages.*.refresh_bytes_on_wire": int,
    "pages.*.refresh_bytes_uncompressed": int,
    "pages.*.refresh_bytes_unchanged": int,
    "data.nodes": int,
    "data.pods": int,
    "data.past_jobs": int,
    "all_within_target": bool,
    "refreshes_within_target": bool,
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teams", type=int, default=300)
    parser.add_argument("--pools", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--pending-pods", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=300)
    parser.add_argument("--requests", type=int, default=60, help="timed requests per page and viewer")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="keep the data of a previous run of the same size")
    return parser.parse_args()


def _batches(rows, size: int = 5000):
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def load(args, researcher) -> float:
    """Fill the emptied database through the models (bulk_create: every column gets its model default, so a field
    added to a model cannot break the load): teams, pools, nodes, quotas, reservations, past and queued jobs, pods."""
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from jobs.models import Job, Pod
    from pools.choices import PoolKind
    from pools.models import Node, Pool, Quota, Reservation
    from portal.models import Team

    started = time.perf_counter()
    now = timezone.now()
    teams = Team.objects.bulk_create(
        [Team(slug=f"team-{n}", name=f"Team {n}") for n in range(1, args.teams + 1)], batch_size=1000
    )
    pools = [
        Pool.objects.create(
            slug=f"pool-{n}",
            name=f"Pool {n}",
            kind=PoolKind.ELASTIC if n % 4 == 0 else PoolKind.RESERVED,
            gpu_model="NVIDIA-A800-SXM4-80GB",
            node_selector={"node-role": f"pool-{n}"},
            contracted_gpus=None if n % 4 == 0 else 8 * (args.nodes // args.pools),
            monthly_price_per_gpu=Decimal("9800.00"),
            hourly_price_per_gpu=Decimal("18.0"),
            min_nodes=0,
            max_nodes=1000,
        )
        for n in range(1, args.pools + 1)
    ]
    reserved = [pool for pool in pools if pool.kind == PoolKind.RESERVED]
    elastic = [pool for pool in pools if pool.kind == PoolKind.ELASTIC]
    for pool in reserved if elastic else []:
        pool.spill_pools.set(elastic[:1])
    Node.objects.bulk_create(
        Node(
            name=f"gpu-node-{n:05d}",
            pool=pools[n % args.pools],
            gpu_capacity=8,
            gpu_allocatable=8,
            ready=n % 50 != 0,
            last_seen_at=now,
        )
        for n in range(1, args.nodes + 1)
    )
    for batch in _batches(Quota(team=team, pool=pool, max_gpus=16) for team in teams for pool in pools):
        Quota.objects.bulk_create(batch)
    Reservation.objects.bulk_create(
        Reservation(
            team=team,
            pool=reserved[index % len(reserved)],
            gpus=8,
            starts_at=now - timedelta(days=20),
            ends_at=now + timedelta(days=40),
            monthly_price_per_gpu=Decimal("9800.00"),
        )
        for index, team in enumerate(teams[:60], start=1)
    )

    # Past jobs over a year, every team; then queued jobs waiting for quota.
    past_states = ["succeeded", "succeeded", "succeeded", "failed", "cancelled"]

    def past_job(n: int) -> Job:
        ended = now - n * timedelta(minutes=5)
        return Job(
            team=teams[n % args.teams],
            pool=pools[n % args.pools],
            submitted_by=researcher,
            name=f"job-{n}",
            image="registry.example.com/train:1.0",
            command=["python", "train.py"],
            gpus=[1, 1, 2, 4, 8][n % 5],
            max_run_minutes=1440,
            state=past_states[n % 5],
            state_changed_at=ended,
            created_at=ended - timedelta(hours=2),
            started_at=ended - timedelta(minutes=100),
            finished_at=ended,
            node_name=f"gpu-node-{1 + n % args.nodes:05d}",
            submit_attempts=1,
        )

    def queued_job(n: int) -> Job:
        at = now - n * timedelta(minutes=1)
        return Job(
            team=teams[n % min(40, args.teams)],
            pool=pools[n % args.pools],
            submitted_by=researcher,
            name=f"queued-{n}",
            image="registry.example.com/train:1.0",
            gpus=8,
            max_run_minutes=1440,
            state="queued",
            state_changed_at=at,
            created_at=at,
        )

    for batch in _batches(past_job(n) for n in range(1, args.jobs + 1)):
        Job.objects.bulk_create(batch)
    Job.objects.bulk_create(queued_job(n) for n in range(1, args.queued + 1))

    # Pods: running and bound (a quarter without GPUs), unschedulable ones with the scheduler's message, finished ones.
    finished = max(args.pods // 50, 1)
    running = args.pods - args.pending_pods - finished
    unschedulable = (
        f"0/{args.nodes} nodes are available: {args.nodes - args.nodes // 50} Insufficient nvidia.com/gpu, "
        f"{args.nodes // 50} node(s) had untolerated taint {{node.kubernetes.io/not-ready: }}. "
        f"preemption: 0/{args.nodes} nodes are available."
    )

    def pod(n: int) -> Pod:
        is_running, is_pending = n <= running, running < n <= running + args.pending_pods
        at = now - n * timedelta(seconds=3)
        return Pod(
            uid=f"uid-{n}",
            namespace=f"team-{1 + n % args.teams}",
            name=f"pod-{n}",
            team=teams[n % args.teams],
            pool=pools[(n % args.nodes) % args.pools] if is_running else pools[n % args.pools],
            node_name="" if is_pending else f"gpu-node-{1 + n % args.nodes:05d}",
            gpus=0 if n % 4 == 0 else 1,
            phase="Running" if is_running else "Pending" if is_pending else "Succeeded",
            scheduled=not is_pending,
            pending_reason=unschedulable if is_pending else "",
            created_at=at,
            bound_at=at,
        )

    for batch in _batches(pod(n) for n in range(1, args.pods + 1)):
        Pod.objects.bulk_create(batch)
    return time.perf_counter() - started


def _on_wire(response) -> int:
    status_line = f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n".encode()
    return len(status_line) + len(response.serialize_headers()) + 4 + len(response.content)


def wire_bytes(client, path: str) -> dict:
    """Bytes of one live refresh of `path` as the page's htmx poll asks for it (the HX-Request header, gzip
    accepted; on the wire = status line, headers and body): after a change (the whole fragment; for the dashboard,
    asked without the version the browser holds), uncompressed for comparison, and while nothing changed (the
    dashboard names the version it shows in its poll URL and gets an empty 204; other pages send the fragment)."""
    page = client.get(path, HTTP_ACCEPT_ENCODING="gzip").content
    if page[:2] == b"\x1f\x8b":
        page = gzip.decompress(page)
    match = re.search(rb'hx-get="([^"]+)"[^>]*hx-trigger="every', page)
    poll = html.unescape(match[1].decode()) if match else path
    changed = client.get(poll.split("since=")[0].rstrip("?&"), HTTP_HX_REQUEST="true", HTTP_ACCEPT_ENCODING="gzip")
    unchanged = client.get(poll, HTTP_HX_REQUEST="true", HTTP_ACCEPT_ENCODING="gzip")
    plain = client.get(poll.split("since=")[0].rstrip("?&"), HTTP_HX_REQUEST="true")
    return {
        "refresh_bytes_on_wire": _on_wire(changed),
        "refresh_bytes_uncompressed": _on_wire(plain),
        "refresh_bytes_unchanged": _on_wire(unchanged),
    }


def main():
    args = parse_args()
    run = Run("ui")
    os.environ["DATABASE_URL"] = bench_database("uibench")
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings.test"

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from jobs.models import Job, Pod
    from pools.models import Node
    from portal.choices import Role
    from portal.models import Membership, Team, User

    setup_test_environment()
    sizes = (Node.objects.count(), Pod.objects.count(), Job.objects.count())
    expected = (args.nodes, args.pods, args.jobs + args.queued)
    load_seconds = None
    reuse = args.reuse and sizes == expected
    if not reuse:
        call_command("flush", interactive=False, verbosity=0)  # every table emptied: the sizes asked, nothing else
    researcher, _ = User.objects.get_or_create(username="bench-researcher")
    admin, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_platform_admin": True})
    if not reuse:
        print(f"loading {args.nodes:,} nodes, {args.pods:,} pods, {args.jobs:,} jobs …", flush=True)
        with transaction.atomic():
            load_seconds = load(args, researcher)
        for team in Team.objects.filter(slug__in=["team-1", "team-2"]):
            Membership.objects.get_or_create(user=researcher, team=team, defaults={"role": Role.RESEARCHER})
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")

    results = {}
    for viewer in (researcher, admin):
        client = Client()
        client.force_login(viewer)
        for page, path in PAGES.items():
            for _ in range(args.warmup):
                assert client.get(path).status_code == 200, (page, viewer)
            timings = []
            for _ in range(args.requests):
                started = time.perf_counter()
                response = client.get(path)
                timings.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
            with CaptureQueriesContext(connection) as queries:
                client.get(path)
            query_count = len(queries.captured_queries)  # before any other request clears the log
            refresh = wire_bytes(client, path)
            key = f"{page}[{'admin' if viewer.is_admin else 'researcher'}]"
            results[key] = {
                "p50_ms": round(statistics.median(timings), 1),
                "p95_ms": round(percentile(timings, 0.95), 1),
                "max_ms": round(max(timings), 1),
                "queries": query_count,
                "bytes": len(response.content),
                **refresh,
            }
            print(
                f"{key:<34} p50 {results[key]['p50_ms']:>7} ms  p95 {results[key]['p95_ms']:>7} ms  "
                f"{results[key]['queries']} queries  refresh {refresh['refresh_bytes_on_wire']:,} B on the wire "
                f"({refresh['refresh_bytes_uncompressed']:,} B uncompressed, {refresh['refresh_bytes_unchanged']:,} B "
                "when nothing changed)",
                flush=True,
            )
    summary = {
        "data": {
            "nodes": args.nodes,
            "pods": args.pods,
            "pending_pods": args.pending_pods,
            "past_jobs": args.jobs,
            "queued_jobs": args.queued,
            "teams": args.teams,
            "pools": args.pools,
        },
        "requests_per_page": args.requests,
        "load_seconds": round(load_seconds, 1) if load_seconds is not None else None,
        "target_p95_ms": TARGET_P95_MS,
        "target_refresh_bytes": TARGET_REFRESH_BYTES,
        "pages": results,
        "all_within_target": all(r["p95_ms"] < TARGET_P95_MS for r in results.values()),
        "refreshes_within_target": all(r["refresh_bytes_on_wire"] <= TARGET_REFRESH_BYTES for r in results.values()),
    }
    run.finish(summary)


if __name__ == "__main__":
    main()
