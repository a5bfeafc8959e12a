"""bench/spend.py at its smoke size: pure arithmetic on generated histories, no database and no cluster."""

import os

from tests.bench.smoke import run_benchmark


def test_spend_benchmark_forecasts_every_month_and_backtests_the_advice():
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "KUBECONFIG")}
    summary = run_benchmark("spend", env)
    assert summary["teams"] == 4
    assert summary["forecasts"] == 4 * 11 * 2  # a team per shape, months 2..12, days 10 and 20
    assert 0 <= summary["forecast"]["interval_coverage_percent"] <= 100
    assert set(summary["forecast"]["by_shape"]) == {"steady", "growing", "bursty", "deadline"}
    assert summary["advice"]["backtests"] == 4 * 11
