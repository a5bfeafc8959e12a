"""The benchmarks that run on a local cluster, each at its smoke size, all on one cluster (bench/cluster_up.py's,
left up for the others: the `bench_cluster` fixture), apart from the tests' own. Each must finish and print a summary
holding every key its figures quote (tests/bench/smoke.py). The fault benchmark restarts that cluster's API server
and Kueue, so it runs last."""

import pytest

from bench.faults import FAULTS
from bench.quote_trace import TRACES
from tests.bench.smoke import run_benchmark

pytestmark = pytest.mark.cluster


def test_cluster_up_benchmark_starts_the_cluster_and_adds_its_nodes(bench_cluster):
    assert bench_cluster["nodes_added"] == 2
    assert bench_cluster["nodes_ready_total"] >= 2 + 9  # its nodes and the demo topology's


def test_cluster_idle_benchmark_samples_every_component(bench_cluster, bench_env):
    summary = run_benchmark("cluster_idle", bench_env)
    assert {"etcd", "kube-apiserver", "kwok"} <= set(summary["cpu_cores"])
    assert summary["nodes_ready"] >= 2


def test_sync_benchmark_lists_resyncs_and_watches(bench_cluster, bench_env):
    summary = run_benchmark("sync", bench_env)
    assert summary["pods"] >= 40
    assert summary["watch_lag_samples"] == 5
    assert len(summary["after_relist_runs"]) == 1


def test_admission_benchmark_runs_every_job_to_its_end_in_the_floor_and_through_the_portal(bench_cluster, bench_env):
    summary = run_benchmark("admission", bench_env)
    assert summary["phases"] == ["floor", "portal"]
    assert summary["jobs_submitted"] == 6
    assert summary["final_states"] == {"succeeded": 6}
    assert summary["floor"]["jobs_created"] == 6
    assert summary["floor"]["final_states"] == {"succeeded": 6}
    assert summary["drain_seconds"] is not None
    for figures in (summary, summary["floor"]):
        for figure in ("admitted_per_second", "created_in_cluster_per_second"):
            assert figures[figure] is not None, figure
        assert figures["submit_to_running_ms"]["p99"] is not None
    for spread in ("submit_to_running_cluster_ms", "workload_sync_lag_ms"):
        assert summary[spread]["p99"] is not None, spread
    for ratio in ("admitted_per_s_ratio", "p99_ratio"):
        assert summary[ratio] is not None, ratio
    # Every stage of the portal's time was timed (the Celery task events, the outbox publication, the observer).
    assert all(stage["samples"] > 0 for stage in summary["portal_profile"]["stages_ms"].values())


def test_exchange_benchmark_replays_the_day_with_lending_off_and_on(bench_cluster, bench_env):
    summary = run_benchmark("exchange", bench_env)
    for label in ("off", "on"):
        replay = summary["replays"][label]
        assert replay["jobs_submitted"] == summary["sizes"]["jobs_per_replay"] > 0
        assert replay["utilisation"]["reserved_in_use_by_anyone"] is not None
        assert replay["lending"]["equal"] is True
    assert summary["invoice"]["each_credit_line_equals_its_lent_at_lending_price"] is True


def test_quote_replay_benchmark_scores_every_trace(bench_cluster, bench_env):
    summary = run_benchmark("quote_replay", bench_env)
    assert list(summary["traces"]) == list(TRACES)
    for kind, trace in summary["traces"].items():
        assert trace["jobs"] == trace["quoted"] == 8, kind
        assert trace["never_started"] == 0, kind
        assert trace["observed_starts"] > 0, kind  # real starts from the observer's watch
        assert trace["coverage"] is not None and trace["median_abs_error_s"] is not None, kind


def test_fault_benchmark_measures_every_fault(bench_cluster, bench_env):
    summary = run_benchmark("faults", bench_env, timeout=900)
    assert list(summary["faults"]) == list(FAULTS)
    for fault, result in summary["faults"].items():
        assert "skipped" not in result, fault
        assert result["accepted"] > 0, fault
