"""Benchmark of lending idle reserved GPUs: one synthetic day of three teams replayed twice on a local cluster,
lending off and lending on, side by side in one run (same seed, same trace).

What runs, each as it runs in production (bench/pipeline.py, as in the admission benchmark):
- a local control plane with Kueue (its own state directory) and KWOK nodes: a reserved pool of `--reserved-nodes`
  eight-GPU nodes (32 GPUs by default) and an elastic pool of `--elastic-nodes` that soft jobs may spill into;
- the portal's rows made through its services: three teams reserving 1/2, 1/4 and 1/4 of the reserved pool (16/8/8;
  no unreserved GPUs, so everything a team borrows is lent), each with a quota of the whole pool there (it may
  borrow up to the pool) and `--elastic-quota` GPUs in the elastic pool; the Kueue projection;
- `manage.py sync_cluster` and a Celery worker (queue `cluster`) as processes of their own; jobs submitted through
  `jobs.services.submit_job` at their time in the trace, each pod "running" its run time on KWOK
  (`pod-complete.stage.kwok.x-k8s.io/delay`).

The trace (``--trace shifts``, the default) follows seed 000: reservations about 30 % used while their teams queue
and spill; 30 % → 65 %+ once idle GPUs are shared. Three teams work in three shifts (time zones): team k's working
day is the k-th third of the compressed day (`--day-seconds`), its night the other two thirds. During its day a
team offers `--peak-factor` × its reservation of GPU load: jobs at uniformly random moments of its day until their
GPU·s reach factor × reservation × the day's length (that many GPUs busy on average, were there room); at night
`--night-load` × its reservation (near idle), the same way. Jobs are of 1, 2 or 4 GPUs (weights 40/35/25) and run
a sixth of a day × U(0.6, 1.0); `--soft-share` of them are soft (may spill into the elastic pool). Without lending
a team's own use is then about a third of its reservation (its day's share of the day), plus whatever of its day's
backlog it runs in its own night; with lending, a team's excess by day runs on the reservations of the two teams
at night: with the default factor 2 and reservations 16/8/8, at most the whole pool in team A's day and half of it
in B's and C's (≈ 67 % over the day, seed 000's 65 %+). The number of jobs follows from the load (`--jobs` is not
used). ``--trace uniform`` is the earlier trace: `--jobs` jobs shared among the teams in proportion to their
reservations, three quarters of a team's jobs in its third of the day and the rest at random in the other two
thirds, each running a third of a day × U(0.6, 1.0) (its baseline utilisation was 50–68 %).
The replays: first every reservation lends nothing (`pools.services.set_lending(lending="none")`), then every
reservation lends its idle GPUs (the default, `idle`); between them the cluster drains (every job of the first
replay finished).

Reports per replay (the last line printed is a JSON summary):
- ``utilisation``: the reserved pool's reserved GPUs in use by anyone over the day window [first submission, + one
  day), from the portal's own metering (`billing.metering.meter`, i.e. the UsageInterval rows the sync wrote):
  (Σ in_reservation + Σ lent) / Σ reserved; beside it the owners' own use alone, Σ in_reservation / Σ reserved
  (the U/R of the billing page) and each team's U/R. Work that runs after the window does not count: a backlog
  queued in team C's day (the last shift) that drains after it, or a job submitted late in the day (``trace``
  says how many GPU·s run past the day even if no job ever waited);
- ``queue_wait_s`` p50/p95: submit call → the job's first Running state written by the sync (a database trigger in
  the benchmark's own database notes the moment), over the jobs that ran; ``never_ran`` the others;
- ``spill_gpu_hours``: metered GPU-hours in the elastic pool over the replay window (first submission → last job
  finished);
- ``reclaim_s`` p50/p99: the jobs of a team submitted while other teams held GPUs above their reservations (so
  borrowed that team's lent GPUs; the pool has no unreserved GPUs) and that fit in the submitting team's
  reservation next to its own jobs then: submit → the job's pod Running (same mark as above);
- ``lender_pods_preempted_inside_reservation``: jobs whose preemption counter rose while, at the poll before
  (every second), they held no borrowed GPU (`jobs.selectors.borrowed_gpus`, the portal's reading of Kueue's
  order); ``preemptions`` all preemptions seen;
- ``lending``: Σ lent GPU-seconds (what the lenders are credited for) vs Σ borrowed GPU-seconds (what the borrowers
  are charged for, inside their overage) over the replay window, exact Decimals from `meter`; ``equal`` is their
  exact equality. After both replays, the month's charges (`billing.services.month_charges`, after
  `refresh_usage`): each lender's credit line vs its own lent GPU-hours × the pool's lending price (to the cent, as
  billing computes a line), Σ lending credit lines vs Σ borrowed GPU-hours × that price (lines are rounded one by
  one, so these two may differ by up to half a cent per line), and what the borrowers pay for those hours at the
  hourly price.

Targets (issue 12): utilisation +25 points or more (lending on − lending off), queue wait p95 halved, reclaim p99
< 60 s, 0 lender pods preempted inside their reservation, Σ lent = Σ borrowed exactly.

Usage: ``python bench/exchange.py [--peak-factor 2] [--day-seconds 150] [--seed 7] ...`` (``--help`` lists all).
Uses its own cluster state directory (.state/devcluster-bench-exchange) and database
(`<DATABASE_URL name>_exchangebench`, dropped and made afresh each run); REDIS_URL's database is purged of queued
tasks: give it one of its own. Stop its cluster, if left running with ``--keep``: ``python -c "from pathlib import
Path; from devcluster import launcher; launcher.Cluster(Path('.state/devcluster-bench-exchange')).down()"``.
The smoke tests (tests/bench/) run it with ``--shared-cluster --day-seconds 12 --reserved-nodes 1 --elastic-nodes 1
--drain-timeout 60``. The trace is bench/exchange_trace.py, a replay and its figures bench/exchange_replay.py.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench import harness, pipeline  # noqa: E402
from bench.exchange_replay import measure, money, replay  # noqa: E402
from bench.exchange_trace import SHARES, make_shift_trace, make_trace, reservation_sizes, trace_summary  # noqa: E402
from bench.harness import NUMBER, NUMBER_OR_NONE, Run  # noqa: E402
from bench.pipeline import GPUS_PER_NODE, RESERVED_POOL, make_bench_pools  # noqa: E402

TARGETS = {
    "utilisation_gain_points": 25.0,
    "queue_wait_p95_ratio_at_most": 0.5,
    "reclaim_p99_s": 60.0,
    "lender_pods_preempted_inside_reservation": 0,
    "lent_equals_borrowed": True,
}
DEFAULT_STATE_NAME = "devcluster-bench-exchange"
# The figures the README quotes, per replay (lending off, on): utilisation and the owners' own U/R, queue wait
# p50/p95, spill GPU-hours, reclaim p50/p99 and its samples, preemptions (of lender pods inside their reservation),
# lent = borrowed; the gain and the ratio between the replays; the invoice's credit lines; the trace's work after
# the window; the load beside the run. A percentile is None over no samples, the gain and the ratio when a replay
# measured nothing to compare.
SUMMARY_KEYS = {
    **{
        f"replays.{label}.{path}": kind
        for label in ("off", "on")
        for path, kind in {
            "jobs_submitted": int,
            "utilisation.reserved_in_use_by_anyone": NUMBER_OR_NONE,
            "utilisation.owners_own_use_U_over_R": NUMBER_OR_NONE,
            "utilisation.per_team_U_over_R": dict,
            "queue_wait_s.p50": NUMBER_OR_NONE,
            "queue_wait_s.p95": NUMBER_OR_NONE,
            "queue_wait_s.never_ran": int,
            "spill_gpu_hours": NUMBER,
            "reclaim_s.p50": NUMBER_OR_NONE,
            "reclaim_s.p99": NUMBER_OR_NONE,
            "reclaim_s.samples": int,
            "preemptions": int,
            "lender_pods_preempted_inside_reservation": int,
            "lending.lent_gpu_seconds": str,
            "lending.borrowed_gpu_seconds": str,
            "lending.equal": bool,
        }.items()
    },
    "sizes.jobs_per_replay": int,
    "sizes.trace_gpu_seconds": int,
    "trace.gpu_seconds_after_window_even_without_waiting": NUMBER,
    "utilisation_gain_points": NUMBER_OR_NONE,
    "queue_wait_p95_ratio": NUMBER_OR_NONE,
    "invoice.lending_credit_lines": str,
    "invoice.each_credit_line_equals_its_lent_at_lending_price": bool,
    "invoice.credits_equal_borrowed_at_lending_price": bool,
    "load_average_1m.min": NUMBER,
    "load_average_1m.mean": NUMBER,
    "load_average_1m.max": NUMBER,
    "wall_seconds": NUMBER,
    "targets_met.*": bool,
    "targets_met.lent_equals_borrowed": bool,
}
log = harness.logger("exchange")


# === The portal's rows =============================================================================================


def team_slug(index: int) -> str:
    return f"exchange-{'abc'[index]}"


def make_portal_rows(reserved_nodes: int, elastic_nodes: int, elastic_quota: int):
    from django.utils import timezone

    from pools import services as pool_services
    from portal.choices import Role
    from portal.models import Membership, Team, User

    contract = reserved_nodes * GPUS_PER_NODE
    elastic, reserved = make_bench_pools(reserved_nodes, elastic_nodes)
    gpus = reservation_sizes(reserved_nodes)
    now = timezone.now()
    teams = []
    for index, reserved_gpus in enumerate(gpus):
        user = User.objects.create(username=f"exchange-lead-{index}", password="!")  # noqa: S106
        team = Team.objects.create(slug=team_slug(index), name=f"Exchange team {'ABC'[index]}")
        Membership.objects.create(user=user, team=team, role=Role.LEAD)
        pool_services.set_namespace_limits(
            team=team, max_pods=200, requests_cpu_millicores=128_000, requests_memory_mib=512 * 1024
        )
        reservation = pool_services.create_reservation(
            team=team,
            pool=reserved,
            gpus=reserved_gpus,
            starts_at=now - timedelta(days=1),
            ends_at=now + timedelta(days=30),
        )
        pool_services.set_quota(team=team, pool=reserved, max_gpus=contract)
        pool_services.set_quota(team=team, pool=elastic, max_gpus=elastic_quota)
        teams.append((team, user, reservation))
    return reserved, elastic, teams


def lending_limits() -> dict[str, object]:
    """The GPU lendingLimit of each team's ClusterQueue in the reserved flavor, as Kueue holds it."""
    from cluster import client
    from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION

    result = {}
    for item in client.custom_objects().list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")[
        "items"
    ]:
        name = item["metadata"]["name"]
        if not name.startswith("team-exchange-"):
            continue
        for group in item["spec"].get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                if RESERVED_POOL not in flavor.get("name", ""):
                    continue
                for resource in flavor.get("resources") or []:
                    if resource.get("name") == "nvidia.com/gpu":
                        result[name] = resource.get("lendingLimit")
    return result


def set_all_lending(teams, lending: str) -> dict:
    from pools import services as pool_services
    from reconcile import kueue as kueue_projection

    for _team, _user, reservation in teams:
        pool_services.set_lending(reservation=reservation, lending=lending)
    kueue_projection.reconcile()
    deadline = time.monotonic() + 120
    while True:
        limits = lending_limits()
        wanted = all((value in (None, 0, "0")) == (lending == "none") for value in limits.values())
        if (limits and wanted) or time.monotonic() > deadline:
            return limits
        time.sleep(1)


# === Main ==========================================================================================================


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--day-seconds", type=float, default=150, help="one compressed day")
    parser.add_argument(
        "--trace", choices=("shifts", "uniform"), default="shifts", help="seed 000's shifts, or the earlier trace"
    )
    parser.add_argument(
        "--peak-factor",
        type=float,
        default=2.0,
        help="shifts: a team's GPU load in its working day, as a multiple of its reservation",
    )
    parser.add_argument(
        "--night-load", type=float, default=0.1, help="shifts: a team's GPU load at night, × its reservation"
    )
    parser.add_argument("--jobs", type=int, default=36, help="uniform: jobs per replay")
    parser.add_argument("--soft-share", type=float, default=0.5, help="share of soft jobs (may spill to elastic)")
    parser.add_argument("--reserved-nodes", type=int, default=4, help="eight-GPU nodes of the reserved pool")
    parser.add_argument("--elastic-nodes", type=int, default=2, help="eight-GPU nodes of the elastic pool")
    parser.add_argument("--elastic-quota", type=int, default=8, help="each team's quota in the elastic pool")
    parser.add_argument("--drain-timeout", type=float, default=240, help="seconds a replay may run past its day")
    parser.add_argument("--seed", type=int, default=7)
    harness.add_cluster_arguments(parser, DEFAULT_STATE_NAME)
    args = parser.parse_args()
    run = Run("exchange")
    wall_started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    env = pipeline.bench_env("exchangebench")
    nodes = args.reserved_nodes + args.elastic_nodes
    cluster, reserved_nodes, elastic_nodes = pipeline.start_cluster(args, nodes, args.elastic_nodes / nodes, log)
    pipeline.setup_django(env, cluster)
    if args.shared_cluster:
        pipeline.clear_earlier_runs([team_slug(index) for index in range(len(SHARES))], log)
    from portal.celery import app as celery_app
    from reconcile import kueue as kueue_projection

    children: list[subprocess.Popen] = []
    results = []
    try:
        reserved, elastic, teams = make_portal_rows(reserved_nodes, elastic_nodes, args.elastic_quota)
        celery_app.control.purge()
        kueue_projection.reconcile()
        pipeline.wait_queues_active(len(teams))
        pipeline.install_marks()
        sync = pipeline.start_sync(env, args.state_dir)
        children.append(sync)
        pipeline.wait_listed(("nodes", "pods", "jobs", "workloads"), sync)
        children.append(pipeline.start_worker(env, args.state_dir, "bench-exchange", 8))
        pipeline.wait_workers(celery_app, {"bench-exchange"}, children, log)
        log(f"setup done after {time.monotonic() - wall_started:.0f}s")

        if args.trace == "shifts":
            trace = make_shift_trace(
                reservation_sizes(args.reserved_nodes),
                args.day_seconds,
                args.peak_factor,
                args.night_load,
                args.soft_share,
                args.seed,
            )
        else:
            trace = make_trace(args.jobs, args.day_seconds, args.soft_share, args.seed)
        offered = trace_summary(trace, args.day_seconds, reservation_sizes(args.reserved_nodes))
        log(f"trace: {len(trace)} jobs, {json.dumps(offered)}")
        limits = {}
        for label, lending in (("off", "none"), ("on", "idle")):
            limits[label] = set_all_lending(teams, lending)
            log(f"lending {lending}: lendingLimits {limits[label]}")
            replayed = replay(trace, teams, reserved, elastic, label, args.day_seconds + args.drain_timeout)
            results.append(measure(replayed, label, args.day_seconds, teams, reserved, elastic))
            log(json.dumps(results[-1]))
        invoice = money(reserved)
    finally:
        pipeline.stop_children(children)
        harness.stop_cluster(args, cluster)

    off, on = results
    gain = None
    if on["utilisation"]["reserved_in_use_by_anyone"] is not None and off["utilisation"]["reserved_in_use_by_anyone"]:
        gain = round(
            on["utilisation"]["reserved_in_use_by_anyone"] - off["utilisation"]["reserved_in_use_by_anyone"], 1
        )
    p95_off, p95_on = off["queue_wait_s"]["p95"], on["queue_wait_s"]["p95"]
    ratio = round(p95_on / p95_off, 3) if p95_on is not None and p95_off else None
    reclaim_p99 = on["reclaim_s"]["p99"]
    summary = {
        "sizes": {
            "reserved_gpus": reserved_nodes * GPUS_PER_NODE,
            "reservations": [reservation.gpus for _t, _u, reservation in teams],
            "quota_per_team_reserved": reserved_nodes * GPUS_PER_NODE,
            "elastic_gpus": elastic_nodes * GPUS_PER_NODE,
            "elastic_quota_per_team": args.elastic_quota,
            "jobs_per_replay": len(trace),
            "day_seconds": args.day_seconds,
            "soft_share": args.soft_share,
            "seed": args.seed,
            "trace_gpu_seconds": sum(job.gpus * job.run_seconds for job in trace),
            "shared_cluster": args.shared_cluster,
        },
        "trace": {
            "kind": args.trace,
            **(
                {"peak_factor": args.peak_factor, "night_load": args.night_load}
                if args.trace == "shifts"
                else {"jobs": args.jobs}
            ),
            **trace_summary(trace, args.day_seconds, [reservation.gpus for _t, _u, reservation in teams]),
        },
        "lending_limits": limits,
        "load_average_1m": run.load_spread(),
        "replays": {"off": off, "on": on},
        "utilisation_gain_points": gain,
        "queue_wait_p95_ratio": ratio,
        "invoice": invoice,
        "wall_seconds": round(time.monotonic() - wall_started, 1),
        "targets": TARGETS,
    }
    summary["targets_met"] = {
        "utilisation_gain": gain is not None and gain >= TARGETS["utilisation_gain_points"],
        "queue_wait_p95_halved": ratio is not None and ratio <= TARGETS["queue_wait_p95_ratio_at_most"],
        "reclaim_p99": reclaim_p99 is not None and reclaim_p99 < TARGETS["reclaim_p99_s"],
        "lender_pods_preempted": off["lender_pods_preempted_inside_reservation"] == 0
        and on["lender_pods_preempted_inside_reservation"] == 0,
        "lent_equals_borrowed": on["lending"]["equal"]
        and off["lending"]["equal"]
        and Decimal(on["lending"]["lent_gpu_seconds"]) > 0
        and Decimal(invoice["lent_gpu_seconds"]) == Decimal(invoice["borrowed_gpu_seconds"])
        and invoice["each_credit_line_equals_its_lent_at_lending_price"],
    }
    run.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
