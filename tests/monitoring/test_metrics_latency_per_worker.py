"""The web runs gunicorn with several workers (Dockerfile, chart: 3). Users saw /metrics answer only the latency
histogram of the worker that happened to take the scrape: its counts jumped between the workers' totals, so
Prometheus saw them go down (false counter resets) and rate()/histogram_quantile() were wrong, and setting
PROMETHEUS_MULTIPROC_DIR changed nothing (the view never read that directory). With the variable set (the web pods'
gunicorn config sets it), a scrape now reads every worker's observations from it; it is read per scrape, so this
test may set it after the import. The chart's gunicorn run end to end: tests/deploy/test_web_metrics_of_every_worker.py.
"""

import subprocess
import sys
import textwrap

import pytest

# Imported before the test sets the variable, as in the rest of the session: prometheus_client chooses its
# multiprocess values once, at import, and this process's own histogram must stay in memory when it is unset again.
import monitoring.metrics  # noqa: F401

OTHER_WORKER = textwrap.dedent(
    """
    from prometheus_client import CollectorRegistry, Histogram
    h = Histogram(
        "reservoir_http_request_duration_seconds", "x", ["method", "route", "status"],
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=CollectorRegistry(),
    )
    h.labels("GET", "served-by-another-worker/", "200").observe(0.2)
    """
)


@pytest.mark.django_db
def test_metrics_include_requests_served_by_the_other_workers(client, tmp_path, monkeypatch):
    # Another gunicorn worker of the same pod, in multi-process mode, served one request.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    subprocess.run([sys.executable, "-c", OTHER_WORKER], check=True, env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    assert list(tmp_path.glob("histogram_*.db")), "the other worker wrote its observation"

    body = client.get("/metrics").content.decode()
    assert 'route="served-by-another-worker/"' in body, "the scrape shows only the answering worker's requests"
    assert "reservoir_jobs{" in body  # the gauges read at scrape time are still there
