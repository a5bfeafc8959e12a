"""Benchmark: server time of the busiest pages at full size — the pools dashboard, the pending view and the jobs list.

Builds its own database (`<DATABASE_URL name>_uibench`, migrated here) and fills it in SQL: TEAMS teams, POOLS pools
sharing NODES nodes of 8 GPUs (2 % NotReady), PODS pods (most Running and bound, some holding no GPU, PENDING_PODS
unschedulable with the scheduler's message, a few finished), JOBS past jobs spread over a year plus QUEUED queued
jobs. Two viewers: a researcher of two teams and a platform admin (who sees every team's jobs).

Each page is requested in-process through Django's test client (URL routing, middleware, session, views, templates:
everything but the network), WARMUP times untimed, then REQUESTS times timed; queries per request are counted in a
separate request, and the bytes on the wire of one live refresh (the page's htmx poll, gzip accepted, headers
included) next to its size uncompressed. The JSON summary (p50, p95 in milliseconds, queries per request, refresh
bytes) is the last line printed.

    .venv/bin/python bench/ui.py                    # 1,000 nodes, 10,000 pods, 100,000 past jobs
    .venv/bin/python bench/ui.py --reuse            # keep the data of a previous run of the same size
    .venv/bin/python bench/ui.py --requests 20      # a quicker look
"""

import argparse
import gzip
import html
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import bench_database  # noqa: E402

TARGET_P95_MS = 150
TARGET_REFRESH_BYTES = 50_000  # a live refresh at full size, on the wire (issue 16)


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


LOAD_SQL = """
TRUNCATE jobs_jobevent, jobs_pod, jobs_job, pools_quota, pools_reservation, pools_node, pools_pool_spill_pools,
         pools_pool, portal_membership, portal_team RESTART IDENTITY CASCADE;

INSERT INTO portal_team (slug, name, description, queueing_strategy, allow_high_priority, created_at)
SELECT 'team-' || n, 'Team ' || n, '', 'StrictFIFO', false, now() FROM generate_series(1, %(teams)s) n;

INSERT INTO pools_pool (slug, name, kind, gpu_model, node_selector, taints, apply_taints, contracted_gpus,
                        monthly_price_per_gpu, hourly_price_per_gpu, min_nodes, max_nodes, created_at, updated_at)
SELECT 'pool-' || n, 'Pool ' || n, CASE WHEN n %% 4 = 0 THEN 'elastic' ELSE 'reserved' END, 'NVIDIA-A800-SXM4-80GB',
       jsonb_build_object('node-role', 'pool-' || n), '[]'::jsonb, false,
       CASE WHEN n %% 4 = 0 THEN NULL ELSE 8 * (%(nodes)s / %(pools)s) END, 9800.00, 18.0, 0, 1000, now(), now()
FROM generate_series(1, %(pools)s) n;

INSERT INTO pools_pool_spill_pools (from_pool_id, to_pool_id)
SELECT p.id, (SELECT id FROM pools_pool WHERE kind = 'elastic' ORDER BY id LIMIT 1)
FROM pools_pool p WHERE p.kind = 'reserved';

INSERT INTO pools_node (name, pool_id, labels, taints, gpu_capacity, gpu_allocatable, ready, missing_taints,
                        unschedulable, last_seen_at)
SELECT 'gpu-node-' || lpad(n::text, 5, '0'), (SELECT id FROM pools_pool ORDER BY id OFFSET (n %% %(pools)s) LIMIT 1),
       '{}'::jsonb, '[]'::jsonb, 8, 8, n %% 50 <> 0, '[]'::jsonb, false, now()
FROM generate_series(1, %(nodes)s) n;

INSERT INTO pools_quota (team_id, pool_id, max_gpus, updated_at)
SELECT t.id, p.id, 16, now() FROM portal_team t CROSS JOIN pools_pool p;

INSERT INTO pools_reservation (team_id, pool_id, gpus, starts_at, ends_at, monthly_price_per_gpu, created_at)
SELECT t.id, (SELECT id FROM pools_pool WHERE kind = 'reserved' ORDER BY id OFFSET (t.id %% 3) LIMIT 1), 8,
       now() - interval '20 days', now() + interval '40 days', 9800.00, now()
FROM portal_team t WHERE t.id <= 60;

-- Past jobs over a year, every team; then queued jobs waiting for quota.
INSERT INTO jobs_job (team_id, pool_id, submitted_by_id, name, image, command, args, env, gpus, cpu_millicores,
                      memory_mib, placement, priority, max_run_minutes, state, state_changed_at, created_at,
                      started_at, finished_at, node_name, pending_reason, last_error, submit_attempts,
                      anti_affinity_group, pod_annotations, spilled, preemptions)
SELECT 1 + n %% %(teams)s, 1 + n %% %(pools)s, %(user)s, 'job-' || n, 'registry.example.com/train:1.0',
       '["python", "train.py"]'::jsonb, '[]'::jsonb, '{}'::jsonb, (ARRAY[1, 1, 2, 4, 8])[1 + n %% 5], 1000, 4096,
       'strict', 50, 1440, (ARRAY['succeeded', 'succeeded', 'succeeded', 'failed', 'cancelled'])[1 + n %% 5],
       now() - (n * interval '5 minutes'), now() - (n * interval '5 minutes') - interval '2 hours',
       now() - (n * interval '5 minutes') - interval '100 minutes', now() - (n * interval '5 minutes'),
       'gpu-node-' || lpad((1 + n %% %(nodes)s)::text, 5, '0'), '', '', 1, '', '{}'::jsonb, false, 0
FROM generate_series(1, %(jobs)s) n;

INSERT INTO jobs_job (team_id, pool_id, submitted_by_id, name, image, command, args, env, gpus, cpu_millicores,
                      memory_mib, placement, priority, max_run_minutes, state, state_changed_at, created_at,
                      node_name, pending_reason, last_error, submit_attempts, anti_affinity_group, pod_annotations,
                      spilled, preemptions)
SELECT 1 + n %% 40, 1 + n %% %(pools)s, %(user)s, 'queued-' || n, 'registry.example.com/train:1.0', '[]'::jsonb,
       '[]'::jsonb, '{}'::jsonb, 8, 1000, 4096, 'strict', 50, 1440, 'queued', now() - n * interval '1 minute',
       now() - n * interval '1 minute', '', '', '', 0, '', '{}'::jsonb, false, 0
FROM generate_series(1, %(queued)s) n;

-- Pods: running and bound (a quarter without GPUs), unschedulable ones with the scheduler's message, finished ones.
INSERT INTO jobs_pod (uid, namespace, name, team_id, pool_id, job_id, node_name, gpus, phase, scheduled,
                      pending_reason, created_at, bound_at, finished_at, seen_at)
SELECT 'uid-' || n, 'team-' || (1 + n %% %(teams)s), 'pod-' || n, 1 + n %% %(teams)s,
       CASE WHEN n <= %(running)s THEN 1 + ((n %% %(nodes)s) %% %(pools)s) ELSE 1 + n %% %(pools)s END,
       NULL,
       CASE WHEN n <= %(running)s OR n > %(running)s + %(pending)s
            THEN 'gpu-node-' || lpad((1 + n %% %(nodes)s)::text, 5, '0') ELSE '' END,
       CASE WHEN n %% 4 = 0 THEN 0 ELSE 1 END,
       CASE WHEN n <= %(running)s THEN 'Running'
            WHEN n <= %(running)s + %(pending)s THEN 'Pending' ELSE 'Succeeded' END,
       n <= %(running)s OR n > %(running)s + %(pending)s,
       CASE WHEN n > %(running)s AND n <= %(running)s + %(pending)s THEN
            '0/1000 nodes are available: 980 Insufficient nvidia.com/gpu, 20 node(s) had untolerated taint '
            || '{node.kubernetes.io/not-ready: }. preemption: 0/1000 nodes are available.' ELSE '' END,
       now() - n * interval '3 seconds', now() - n * interval '3 seconds', NULL, now()
FROM generate_series(1, %(pods)s) n;
"""


def load(cursor, args, user_id: int) -> float:
    started = time.perf_counter()
    finished = max(args.pods // 50, 1)
    running = args.pods - args.pending_pods - finished
    cursor.execute(
        LOAD_SQL,
        {
            "teams": args.teams,
            "pools": args.pools,
            "nodes": args.nodes,
            "pods": args.pods,
            "pending": args.pending_pods,
            "running": running,
            "jobs": args.jobs,
            "queued": args.queued,
            "user": user_id,
        },
    )
    return time.perf_counter() - started


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


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
    call_command("migrate", verbosity=0)
    researcher, _ = User.objects.get_or_create(username="bench-researcher")
    admin, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_platform_admin": True})
    sizes = (Node.objects.count(), Pod.objects.count(), Job.objects.count())
    expected = (args.nodes, args.pods, args.jobs + args.queued)
    load_seconds = None
    if not (args.reuse and sizes == expected):
        print(f"loading {args.nodes:,} nodes, {args.pods:,} pods, {args.jobs:,} jobs …", flush=True)
        with transaction.atomic(), connection.cursor() as cursor:
            load_seconds = load(cursor, args, researcher.pk)
        for team in Team.objects.filter(slug__in=["team-1", "team-2"]):
            Membership.objects.get_or_create(user=researcher, team=team, defaults={"role": Role.RESEARCHER})
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")

    pages = {
        "pools_dashboard": "/pools/",
        "pending": "/jobs/pending/",
        "jobs_list": "/jobs/",
        "jobs_list_filtered": "/jobs/?state=failed&pool=pool-2",
    }
    results = {}
    for viewer in (researcher, admin):
        client = Client()
        client.force_login(viewer)
        for page, path in pages.items():
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
        "benchmark": "ui",
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
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
