"""Benchmark: metering one month of a full-size install, with lending against the same month without it, from
scratch and from the daily rollups.

Builds its own database (`<DATABASE_URL name>_bench`, bench/benchdb.py), fills it in SQL with generate_series —
TEAMS teams, POOLS pools (70 % reserved, the rest elastic and shared), reservations, and INTERVALS pod intervals
spread over the month and a few days either side (some still open, some of zero length) — then measures:

- floor: one `SELECT sum(...)` scan of the interval table, the least any metering must cost;
- the month without lending and the month with lending, side by side on the same data, in alternating runs (issue
  30: the month with lending <= 1.5 x the month without it, and < 15 s at 2,000,000 intervals). Without lending is
  `billing.metering.meter(lending=False)`: R, U, O and S as metering computed them before lending (one sort, one
  window pass); with lending is the real `meter` (scratch: R, U, O, S, lent, borrowed per team and pool);
- rollups_build: every day of the month metered into `DailyUsage` (`billing.services.recompute_days`);
- from_rollups: the month's figures and every team's cost lines from the rollups (`billing.services.month_charges`);
- peak memory of this process and of the PostgreSQL backend (sampled), and the temporary files PostgreSQL wrote for
  each query (`pg_stat_database` temp_files and temp_bytes, before and after).

It checks that the rollups add up to the month from scratch exactly, and that both months agree on R, U, O and S.
The JSON summary is the last line printed.

    .venv/bin/python bench/metering.py                       # full size: 300 teams, 20 pools, 2,000,000 intervals
    .venv/bin/python bench/metering.py --reuse               # the same, on the data a previous run loaded
    .venv/bin/python bench/metering.py --intervals 100000    # a quick check
    .venv/bin/python bench/metering.py --teams 3 --pools 3 --intervals 300 --repeat 1   # the smoke size (tests/bench/)
"""

import argparse
import contextlib
import os
import resource
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import bench_database  # noqa: E402
from bench.harness import NUMBER, NUMBER_OR_NONE, Run  # noqa: E402

# The figures docs/benchmarks.md quotes: the month with and without lending and their ratio, the floor, the rollups'
# build and the month from them, whether the rollups equal the scratch figures, memory and PostgreSQL's temporary
# files.
SUMMARY_KEYS = {
    "intervals": int,
    "teams": int,
    "pools": int,
    "floor_sum_scan_seconds": NUMBER,
    "month_without_lending_seconds": NUMBER,
    "month_without_lending_runs_seconds": list,
    "scratch_seconds": NUMBER,
    "scratch_runs_seconds": list,
    "lending_ratio_to_without": NUMBER,
    "backend_cpu_seconds.with_lending": NUMBER,
    "backend_cpu_seconds.without_lending": NUMBER,
    "lending_cpu_ratio_to_without": NUMBER_OR_NONE,
    "scratch_ratio_to_floor": NUMBER,
    "rollups_build_month_seconds": NUMBER,
    "from_rollups_seconds": NUMBER,
    "rollups_equal_scratch": bool,
    "without_lending_agrees": bool,
    "borrowed_gpu_hours": NUMBER,
    "peak_rss_postgres_backend_mb.scratch": NUMBER,
    "postgres_temp_files_per_run.with_lending": NUMBER,
    "postgres_temp_files_per_run.without_lending": NUMBER,
    "postgres_temp_mb_per_run.with_lending": NUMBER,
    "postgres_temp_mb_per_run.without_lending": NUMBER,
    "targets_met": bool,
}
TARGET_LENDING_RATIO = 1.5
TARGET_SCRATCH_SECONDS = 15
TARGET_FROM_ROLLUPS_SECONDS = 1


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teams", type=int, default=300)
    parser.add_argument("--pools", type=int, default=20)
    parser.add_argument("--intervals", type=int, default=2_000_000)
    parser.add_argument("--month", default="2026-10", help="YYYY-MM to meter")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timed step; the best is reported")
    parser.add_argument("--reuse", action="store_true", help="keep the data of a previous run of the same size")
    return parser.parse_args()


class PeakSampler:
    """Samples the resident memory of this process and of one PostgreSQL backend every 20 ms."""

    def __init__(self, backend_pid: int):
        import psutil

        self.backend = psutil.Process(backend_pid)
        self.backend_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # sampling is best effort
                self.backend_peak = max(self.backend_peak, self.backend.memory_info().rss)
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


LOAD_SQL = """
INSERT INTO portal_team (slug, name, description, queueing_strategy, allow_high_priority, created_at)
SELECT 'bench-team-' || n, 'Bench team ' || n, '', 'StrictFIFO', false, now() FROM generate_series(1, %(teams)s) n;

INSERT INTO pools_pool (slug, name, kind, gpu_model, node_selector, taints, apply_taints, contracted_gpus,
                        monthly_price_per_gpu, hourly_price_per_gpu, lending_price_share, min_nodes, max_nodes,
                        created_at, updated_at)
SELECT 'bench-pool-' || n, 'Bench pool ' || n,
       CASE WHEN n <= ceil(%(pools)s * 0.7) THEN 'reserved' WHEN n %% 2 = 0 THEN 'elastic' ELSE 'shared' END,
       'NVIDIA-A800-SXM4-80GB', jsonb_build_object('node-role', 'bench-' || n), '[]'::jsonb, false,
       CASE WHEN n <= ceil(%(pools)s * 0.7) THEN 2048 END,
       9800.00, (6 + n %% 5 * 3.25)::numeric(12, 4), 0.5, 0, 256, now(), now()
FROM generate_series(1, %(pools)s) n;

-- Each team reserves in two reserved pools: one for the whole month, one starting or ending mid-month.
INSERT INTO pools_reservation (team_id, pool_id, gpus, starts_at, ends_at, monthly_price_per_gpu, lending,
                               protected_gpus, created_at)
SELECT t.id, p.id, 1 + (t.id %% 4) * 4,
       CASE WHEN k = 0 THEN %(start)s - interval '40 days'
            ELSE %(start)s + (t.id %% 20) * interval '1 day' + interval '7 hours' END,
       CASE WHEN k = 0 THEN %(end)s + interval '40 days' ELSE %(end)s - (t.id %% 7) * interval '1 day' END,
       9800.00, 'idle', 0, now()
FROM portal_team t
CROSS JOIN generate_series(0, 1) k
JOIN LATERAL (
    SELECT id FROM pools_pool WHERE kind = 'reserved' ORDER BY id
    OFFSET ((t.id * 3 + k * 5) %% ceil(%(pools)s * 0.7)::int) LIMIT 1
) p ON true
WHERE t.slug LIKE 'bench-team-%%';

-- Intervals: a team mostly uses its home pools; starts spread over the month and 3 days either side; durations
-- from a minute to about two days; 1 %% still open, 0.5 %% of zero length.
WITH teams AS (SELECT array_agg(id ORDER BY id) AS ids FROM portal_team WHERE slug LIKE 'bench-team-%%'),
     pools AS (SELECT array_agg(id ORDER BY id) AS ids, count(*) AS n FROM pools_pool WHERE slug LIKE 'bench-pool-%%'),
     draws AS (
         SELECT n, random() AS r1, random() AS r2, random() AS r3, random() AS r4, random() AS r5
         FROM generate_series(1, %(intervals)s) n
     )
INSERT INTO billing_usageinterval
    (pod_uid, namespace, pod_name, team_id, pool_id, node_name, gpus, started_at, ended_at)
SELECT 'bench-' || d.n, 'team-bench', 'pod-' || d.n,
       teams.ids[1 + (d.n %% array_length(teams.ids, 1))],
       pools.ids[1 + ((d.n %% array_length(teams.ids, 1)) * 3 + (d.r1 * 3)::int
                      + CASE WHEN d.r1 > 0.85 THEN 11 ELSE 0 END) %% pools.n],
       'node-' || (d.n %% 2000),
       (ARRAY[1, 1, 2, 4, 8])[1 + floor(d.r2 * 5)::int],
       starts.at,
       CASE WHEN d.r4 < 0.01 THEN NULL
            WHEN d.r4 < 0.015 THEN starts.at
            ELSE starts.at + make_interval(secs => 60 + (-ln(1 - d.r5 * 0.9999)) * 5 * 3600) END
FROM draws d, teams, pools,
     LATERAL (SELECT %(start)s - interval '3 days' + d.r3 * (%(end)s - %(start)s + interval '6 days') AS at) starts;
"""


def load(cursor, *, teams: int, pools: int, intervals: int, start, end) -> float:
    began = time.perf_counter()
    cursor.execute(
        "TRUNCATE billing_invoiceline, billing_invoice, billing_closedmonth, billing_dailyusage, billing_meteredday, "
        "billing_staleday, billing_usageinterval, pools_reservation, pools_quota, pools_node, pools_pool_spill_pools, "
        "pools_pool, portal_membership, portal_team CASCADE"
    )
    # A bulk load straight into the tables, not through billing.usage: it marks no stale days, and the benchmark
    # meters every day itself (tests/billing/test_usage_writers.py names this one exception).
    cursor.execute(LOAD_SQL, {"teams": teams, "pools": pools, "intervals": intervals, "start": start, "end": end})
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run the deferred foreign-key checks inside the load's time
    return time.perf_counter() - began


def best_of(repeat: int, function):
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - began)
    return min(times), times, result


def main():
    args = parse_args()
    run = Run("metering")
    os.environ["DATABASE_URL"] = bench_database("bench")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only")

    import django

    django.setup()
    from django.db import connection, transaction

    from billing import metering, services
    from billing.models import DailyUsage, UsageInterval
    from billing.periods import days_of, month_bounds, next_month, parse_month

    month = parse_month(args.month)
    start, end = month_bounds(month)
    now = datetime(end.year, end.month, 2, 6, tzinfo=UTC)  # the month has ended: everything counts to its end
    connection.ensure_connection()
    with connection.cursor() as cursor:
        present = UsageInterval.objects.filter(pod_uid__startswith="bench-").count()
        load_seconds = None
        if not (args.reuse and present == args.intervals):
            print(f"loading {args.intervals:,} intervals, {args.teams} teams, {args.pools} pools …", flush=True)
            with transaction.atomic():
                load_seconds = load(
                    cursor, teams=args.teams, pools=args.pools, intervals=args.intervals, start=start, end=end
                )
            cursor.execute("VACUUM ANALYZE billing_usageinterval")
            cursor.execute("ANALYZE pools_reservation")
        cursor.execute("SELECT pg_backend_pid()")
        backend_pid = cursor.fetchone()[0]
        cursor.execute("SELECT pg_total_relation_size('billing_usageinterval')")
        table_bytes = cursor.fetchone()[0]

    def floor():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT sum(gpus * extract(epoch FROM coalesce(ended_at, %s) - started_at)) FROM billing_usageinterval",
                [now],
            )
            return cursor.fetchone()[0]

    def temp_written() -> tuple[int, int]:
        """Temporary files and bytes PostgreSQL has written in this database so far (this backend's own counts are
        flushed first: they are reported when it goes idle)."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(1.1)  # PostgreSQL flushes a backend's statistics at most once a second
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT temp_files, temp_bytes FROM pg_stat_database WHERE datname = current_database()")
            return cursor.fetchone()

    def scratch():
        return metering.meter(start=start, end=end, now=now)

    def without_lending():
        return metering.meter(start=start, end=end, now=now, lending=False)

    def build_rollups():
        return services.recompute_days(days=days_of(month, next_month(month) - timedelta(days=1)), now=now)

    def from_rollups():
        with transaction.atomic():
            usage = services.month_usage_seconds(month=month)
            charges = services.month_charges(month=month, now=now)
        return usage, charges

    import psutil

    print("timing …", flush=True)
    floor_best, floor_runs, _ = best_of(args.repeat, floor)
    # The month without and with lending, alternately, each run's temporary files counted apart.
    runs = {"without_lending": [], "with_lending": []}
    # The PostgreSQL backend's own CPU seconds for each run: beside the wall time, a figure the machine's other work
    # disturbs less (it still shares caches and cores).
    backend_cpu = {"without_lending": [], "with_lending": []}
    backend = psutil.Process(backend_pid)

    def backend_cpu_seconds() -> float:
        times = backend.cpu_times()
        return times.user + times.system

    temp = {"without_lending": [0, 0], "with_lending": [0, 0]}
    peaks = {"without_lending": 0, "with_lending": 0}
    results = {}
    for _ in range(args.repeat):
        for name, function in (("without_lending", without_lending), ("with_lending", scratch)):
            files_before, bytes_before = temp_written()
            with PeakSampler(backend_pid) as sampler:
                cpu_began, began = backend_cpu_seconds(), time.perf_counter()
                results[name] = function()
                runs[name].append(time.perf_counter() - began)
                backend_cpu[name].append(backend_cpu_seconds() - cpu_began)
            peaks[name] = max(peaks[name], sampler.backend_peak)
            files_after, bytes_after = temp_written()
            temp[name][0] += files_after - files_before
            temp[name][1] += bytes_after - bytes_before
            print(f"{name}: {runs[name][-1]:.3f} s, PostgreSQL CPU {backend_cpu[name][-1]:.3f} s", flush=True)
    scratch_rows, plain_rows = results["with_lending"], results["without_lending"]
    scratch_best, scratch_runs = min(runs["with_lending"]), runs["with_lending"]
    plain_best = min(runs["without_lending"])
    scratch_backend_peak = peaks["with_lending"]
    with PeakSampler(backend_pid) as sampler:
        build_best, build_runs, _ = best_of(1, build_rollups)
    build_backend_peak = sampler.backend_peak
    with PeakSampler(backend_pid) as sampler:
        rollup_best, rollup_runs, (usage, charges) = best_of(args.repeat, from_rollups)
    rollup_backend_peak = sampler.backend_peak

    def figures(row) -> tuple:
        return row.reserved, row.in_reservation, row.overage, row.spill

    plain_agrees = {(row.team_id, row.pool_id): figures(row) for row in plain_rows} == {
        (row.team_id, row.pool_id): figures(row) for row in scratch_rows
    }
    # The rollups must add up to the month from scratch, exactly.
    expected = {
        (row.team_id, row.pool_id): (row.reserved, row.in_reservation, row.overage, row.spill)
        for row in scratch_rows
        if any((row.reserved, row.in_reservation, row.overage, row.spill))
    }
    got = {key: (row["reserved"], row["in_reservation"], row["overage"], row["spill"]) for key, row in usage.items()}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(*) FILTER (WHERE ended_at IS NULL) FROM billing_usageinterval")
        interval_count, open_count = cursor.fetchone()
    summary = {
        "month": args.month,
        "teams": args.teams,
        "pools": args.pools,
        "intervals": interval_count,
        "open_intervals": open_count,
        "team_pool_pairs": len(expected),
        "rollup_rows": DailyUsage.objects.count(),
        "invoice_lines": sum(len(lines) for lines in charges.values()),
        "interval_table_mb": round(table_bytes / 2**20, 1),
        "load_seconds": round(load_seconds, 2) if load_seconds is not None else None,
        "floor_sum_scan_seconds": round(floor_best, 3),
        "month_without_lending_seconds": round(plain_best, 3),
        "month_without_lending_runs_seconds": [round(t, 3) for t in runs["without_lending"]],
        "scratch_seconds": round(scratch_best, 3),
        "scratch_runs_seconds": [round(t, 3) for t in scratch_runs],
        "lending_ratio_to_without": round(scratch_best / plain_best, 2),
        "backend_cpu_seconds": {name: round(min(values), 3) for name, values in backend_cpu.items()},
        # None when the runs were too short for the clock of process CPU times (10 ms), as at the smoke size
        "lending_cpu_ratio_to_without": (
            round(min(backend_cpu["with_lending"]) / min(backend_cpu["without_lending"]), 2)
            if min(backend_cpu["without_lending"]) > 0
            else None
        ),
        "scratch_ratio_to_floor": round(scratch_best / floor_best, 1),
        "without_lending_agrees": plain_agrees,
        "borrowed_gpu_hours": round(float(sum(row.borrowed for row in scratch_rows)) / 3600, 1),
        "lent_gpu_hours": round(float(sum(row.lent for row in scratch_rows)) / 3600, 1),
        "rollups_build_month_seconds": round(build_best, 3),
        "from_rollups_seconds": round(rollup_best, 4),
        "from_rollups_runs_seconds": [round(t, 4) for t in rollup_runs],
        "from_rollups_ratio_to_floor": round(rollup_best / floor_best, 3),
        "rollups_equal_scratch": got == expected,
        "peak_rss_python_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_postgres_backend_mb": {
            "without_lending": round(peaks["without_lending"] / 2**20, 1),
            "scratch": round(scratch_backend_peak / 2**20, 1),
            "rollups_build": round(build_backend_peak / 2**20, 1),
            "from_rollups": round(rollup_backend_peak / 2**20, 1),
        },
        "postgres_temp_files_per_run": {name: round(files / args.repeat, 1) for name, (files, _) in temp.items()},
        "postgres_temp_mb_per_run": {name: round(size / args.repeat / 2**20, 1) for name, (_, size) in temp.items()},
        "work_mem": metering.METERING_WORK_MEM,
        "targets": {
            "scratch_seconds": TARGET_SCRATCH_SECONDS,
            "lending_ratio_to_without": TARGET_LENDING_RATIO,
            "from_rollups_seconds": TARGET_FROM_ROLLUPS_SECONDS,
        },
        "targets_met": (
            scratch_best < TARGET_SCRATCH_SECONDS
            and scratch_best / plain_best <= TARGET_LENDING_RATIO
            and rollup_best < TARGET_FROM_ROLLUPS_SECONDS
        ),
    }
    run.finish(summary)
    return 0 if summary["rollups_equal_scratch"] and summary["without_lending_agrees"] else 1


if __name__ == "__main__":
    sys.exit(main())
