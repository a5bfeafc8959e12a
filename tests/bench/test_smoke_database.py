"""The benchmarks that need only PostgreSQL, each run at its smoke size: it must finish and print a summary holding
every key its figures quote (tests/bench/smoke.py)."""

from tests.bench.smoke import run_benchmark


def test_ui_benchmark_serves_every_page_to_both_viewers(bench_env):
    summary = run_benchmark("ui", bench_env)
    assert len(summary["pages"]) == 8
    assert all(page["queries"] > 0 and page["refresh_bytes_on_wire"] > 0 for page in summary["pages"].values())


def test_api_benchmark_answers_every_request_and_its_floors_answer_the_same(bench_env):
    summary = run_benchmark("api", bench_env)
    for scenario in ("jobs_running", "quota_updates"):
        assert summary["load"]["2"][scenario]["requests"] > 0
        assert summary["load"]["2"][scenario]["errors"] == {}
    for request in ("jobs_list", "quota_update"):
        measured = summary["cpu_per_request"][request]
        assert measured["floor_equals_api"] is True
        assert measured["floor_cpu_ms"] > 0 and measured["real_cpu_ms"] > 0


def test_metering_benchmark_rollups_equal_the_month_from_scratch(bench_env):
    summary = run_benchmark("metering", bench_env)
    assert summary["intervals"] == 300
    assert summary["rollups_equal_scratch"] is True


def test_quote_benchmark_quotes_every_pending_job_and_keeps_each_first_quote_once(bench_env):
    summary = run_benchmark("quote", bench_env)
    assert summary["pending_jobs"] == 30
    assert summary["record_first_kept"] == 30 and summary["record_again_kept"] == 0
