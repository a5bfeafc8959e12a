"""Benchmark: what the start-time quotes cost (jobs/quote.py, jobs/quote_selectors.py, jobs/quote_preview.py), in
the database only.

Builds its own database (`<DATABASE_URL name>_quote`, bench/benchdb.py) afresh and fills it with the ORM: TEAMS
teams over POOLS reserved pools (each with an elastic spill pool), their quotas and reservations, RUNNING running
jobs, HISTORY finished jobs per team (the history the quotes are fitted on) and PENDING queued jobs spread over the
teams, then measures:

- quote_all: every pending job's quote — the inputs of every team with a queued job (`team_queues`) and the replay
  of each queue (`quote_queue`), as the pending page and `record_quotes` compute them; target < 200 ms for 1,000;
- preview: what the submit preview's quote adds to its request — `preview_quote` for one job of a team with a
  queue, its alternatives included; target < 50 ms p95;
- record: `services.record_quotes` once from empty (every job's first quote kept) and once more (nothing moved).

The JSON summary is the last line printed. Run on a quiet machine (`noisy` says when it was not).

    .venv/bin/python bench/quote.py                      # full size: 1,000 pending jobs over 100 teams
    .venv/bin/python bench/quote.py --teams 3 --pending 30 --running 10 --history 20 --repeat 2   # the smoke size

`--replay` runs the quotes' calibration instead (bench/quote_replay.py, issue 28 part 3: three traces through the
portal, Kueue, the scheduler and KWOK nodes, each job's quote at submit against its real start); the options after
it are the replay's (`bench/quote.py --replay --help`).
"""

import argparse
import os
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import bench_database  # noqa: E402
from bench.harness import NUMBER, NUMBER_OR_NONE, Run, logger, spread  # noqa: E402

# The figures docs/quote.md quotes.
SUMMARY_KEYS = {
    "pending_jobs": int,
    "teams": int,
    "running_jobs": int,
    "quote_all_ms.p50": NUMBER_OR_NONE,
    "quote_all_ms.p95": NUMBER_OR_NONE,
    "quote_all_ms.max": NUMBER_OR_NONE,
    "quote_all_queries": int,
    "preview_ms.p50": NUMBER_OR_NONE,
    "preview_ms.p95": NUMBER_OR_NONE,
    "preview_queries": int,
    "record_first_ms": NUMBER,
    "record_first_kept": int,
    "record_again_kept": int,
    "targets_met": bool,
}
QUOTE_ALL_TARGET_MS = 200
PREVIEW_TARGET_MS = 50
log = logger("quote")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replay", action="store_true", help="run the calibration replay (bench/quote_replay.py)")
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--pools", type=int, default=4, help="reserved pools (each with an elastic spill pool)")
    parser.add_argument("--pending", type=int, default=1000, help="queued jobs, spread over the teams")
    parser.add_argument("--running", type=int, default=2000, help="running jobs, spread over the teams")
    parser.add_argument("--history", type=int, default=200, help="finished jobs per team")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each measurement")
    return parser.parse_args()


def fill(args, now):
    """The install: teams, pools, quotas, reservations, running, finished and queued jobs (bulk inserts)."""
    from jobs.choices import JobState, Placement
    from jobs.models import Job, JobEvent, Workload
    from pools.choices import PoolKind
    from pools.models import Pool, Quota, Reservation
    from portal.models import Team, User

    user = User.objects.create(username="bench-quote")
    teams = Team.objects.bulk_create(Team(slug=f"q{i}", name=f"Quote team {i}") for i in range(args.teams))
    pools = []
    for index in range(args.pools):
        home = Pool.objects.create(
            slug=f"reserved-{index}",
            name=f"Reserved {index}",
            kind=PoolKind.RESERVED,
            gpu_model="A800",
            node_selector={"pool": f"r{index}"},
            contracted_gpus=8 * args.teams,
            hourly_price_per_gpu=Decimal("18"),
            max_nodes=args.teams,
        )
        spill = Pool.objects.create(
            slug=f"elastic-{index}",
            name=f"Elastic {index}",
            kind=PoolKind.ELASTIC,
            gpu_model="A800",
            node_selector={"pool": f"e{index}"},
            hourly_price_per_gpu=Decimal("24"),
            gpus_per_node=8,
            max_nodes=4,
        )
        home.spill_pools.set([spill])
        pools.append((home, spill))
    Quota.objects.bulk_create(
        Quota(team=team, pool=pool, max_gpus=16)
        for index, team in enumerate(teams)
        for pool in pools[index % len(pools)]
    )
    Reservation.objects.bulk_create(
        Reservation(
            team=team,
            pool=pools[index % len(pools)][0],
            gpus=8,
            starts_at=now - timedelta(days=10),
            ends_at=now + timedelta(days=20),
            monthly_price_per_gpu=Decimal("9800"),
        )
        for index, team in enumerate(teams)
    )

    def job(i, team_index, **fields):
        home = pools[team_index % len(pools)][0]
        return Job(
            team=teams[team_index],
            pool=home,
            submitted_by=user,
            name=f"bench-{i}",
            image="registry.example.com/train:1",
            gpus=1 + i % 4,
            max_run_minutes=60 * (1 + i % 12),
            **fields,
        )

    jobs = [
        job(
            i,
            i % args.teams,
            state=JobState.RUNNING,
            created_at=now - timedelta(minutes=5 + i % 300, seconds=2),
            started_at=now - timedelta(minutes=5 + i % 300),
            running_seen_at=now - timedelta(minutes=5 + i % 300),
        )
        for i in range(args.running)
    ]
    for team_index in range(args.teams):
        for k in range(args.history):
            started = now - timedelta(days=1 + k % 9, hours=k % 24)
            jobs.append(
                job(
                    k,
                    team_index,
                    state=JobState.SUCCEEDED if k % 7 else JobState.FAILED,
                    started_at=started,
                    finished_at=started + timedelta(minutes=10 + (k * 37) % 600),
                )
            )
    jobs += [
        job(
            i,
            i % args.teams,
            state=JobState.QUEUED,
            created_at=now - timedelta(seconds=i),
            placement=Placement.SOFT if i % 5 == 0 else Placement.STRICT,
        )
        for i in range(args.pending)
    ]
    Job.objects.bulk_create(jobs, batch_size=2000)
    # The running jobs' first Workloads (made a second after the submission, admitted half a second later), and for
    # one start in five a running job of its pool that went back to the queue on its way (a start that preempted):
    # what the path's delay is read off (`jobs.quote_selectors.start_delays`).
    running = jobs[: args.running]
    Workload.objects.bulk_create(
        Workload(
            uid=f"bench-{each.pk}",
            namespace="bench",
            name=f"job-rsv-{each.pk}",
            job=each,
            created_at=each.created_at + timedelta(seconds=1),
            admitted=True,
            admitted_at=each.created_at + timedelta(seconds=1.5),
        )
        for each in running
    )
    JobEvent.objects.bulk_create(
        JobEvent(
            job=running[(index + len(pools)) % len(running)],  # another team's job of the same pool
            from_state=JobState.RUNNING,
            to_state=JobState.QUEUED,
            at=each.created_at + timedelta(seconds=1),
        )
        for index, each in enumerate(running)
        if index % 5 == 0
    )
    return teams, pools


def timed(repeat, function):
    """`function()` run `repeat` times: the milliseconds of each run and the last result."""
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = function()
        times.append((time.perf_counter() - began) * 1000)
    return times, result


def main():
    if "--replay" in sys.argv[1:]:
        from bench.quote_replay import main as replay

        return replay([arg for arg in sys.argv[1:] if arg != "--replay"])
    args = parse_args()
    run = Run("quote")
    os.environ["DATABASE_URL"] = bench_database("quote", fresh=True)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only")

    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from jobs import services
    from jobs.choices import JobState
    from jobs.models import Job
    from jobs.quote import quote_queue
    from jobs.quote_preview import preview_quote
    from jobs.quote_selectors import team_queues
    from jobs.specs import JobSpec

    now = timezone.now()
    log(f"filling: {args.teams} teams, {args.pending} pending, {args.running} running, {args.history}/team history")
    teams, pools = fill(args, now)
    with connection.cursor() as cursor:
        # As autovacuum leaves a table in use: its statistics, and the visibility map of pages long unchanged (the
        # finished jobs the history is read from, index-only)
        cursor.execute("VACUUM ANALYZE")

    def quote_all():
        team_ids = set(
            Job.objects.filter(state=JobState.QUEUED).values_list("team_id", flat=True).order_by().distinct()
        )
        quotes = {}
        for queue in team_queues(team_ids, now=now).values():
            quotes.update(quote_queue(queue, now=now))
        return quotes

    quote_all()  # warm-up
    with CaptureQueriesContext(connection) as queries:
        quotes = quote_all()
    quote_all_queries = len(queries.captured_queries)
    assert len(quotes) == args.pending, (len(quotes), args.pending)
    all_times, _ = timed(args.repeat, quote_all)
    log(f"quote_all: {spread(all_times, 0.95)}")

    spec = JobSpec(name="preview", image="registry.example.com/train:1", gpus=4, max_run_minutes=120)

    def preview():
        return preview_quote(team=teams[0], pool=pools[0][0], spec=spec, now=now)

    preview()
    with CaptureQueriesContext(connection) as queries:
        preview()
    preview_queries = len(queries.captured_queries)
    preview_times, _ = timed(max(args.repeat, 5), preview)
    log(f"preview: {spread(preview_times, 0.95)}")

    began = time.perf_counter()
    first = services.record_quotes(now=now)
    record_first_ms = (time.perf_counter() - began) * 1000
    again = services.record_quotes(now=now)

    all_spread, preview_spread = spread(all_times, 0.95), spread(preview_times, 0.95)
    run.finish(
        {
            "pending_jobs": args.pending,
            "teams": args.teams,
            "running_jobs": args.running,
            "quote_all_ms": all_spread,
            "quote_all_queries": quote_all_queries,
            "preview_ms": preview_spread,
            "preview_queries": preview_queries,
            "record_first_ms": round(record_first_ms, 1),
            "record_first_kept": first,
            "record_again_kept": again,
            "targets_met": bool(
                all_spread["p95"] is not None
                and all_spread["p95"] < QUOTE_ALL_TARGET_MS
                and preview_spread["p95"] is not None
                and preview_spread["p95"] < PREVIEW_TARGET_MS
            ),
        }
    )


if __name__ == "__main__":
    sys.exit(main())
