"""The web pod's /metrics counts the requests of all its gunicorn workers, as the chart runs them.

The chart (and the image, and docker-compose) run gunicorn with 3 workers. Users saw the latency histogram of only
the worker that happened to answer the scrape: its counts jumped between the workers' totals from one scrape to the
next, which Prometheus reads as counter resets (rate() and histogram_quantile() wrong). The web command now loads
portal/gunicorn_config.py, which puts the workers in prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR,
emptied when the server starts, a worker that exits marked dead), and /metrics reads every worker's file.

Here the chart's web command runs under gunicorn on a loopback port with the chart's environment (as in
test_metrics_scrape_on_pod_address.py); requests from several clients at once spread over the workers, and every
scrape then shows all of them."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connections

from tests.deploy.conftest import ROOT, helm_template
from tests.deploy.test_metrics_scrape_on_pod_address import TOKEN, web_environment

PREVIOUS_RUN = """
from prometheus_client import CollectorRegistry, Histogram
h = Histogram(
    "reservoir_http_request_duration_seconds", "x", ["method", "route", "status"], registry=CollectorRegistry()
)
h.labels("GET", "left-by-a-previous-run", "200").observe(0.1)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(port: int, path: str, token: str = "") -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def _healthz_count(body: str) -> float:
    pattern = r'reservoir_http_request_duration_seconds_count\{[^}]*route="healthz"[^}]*status="200"[^}]*\} (\S+)'
    return sum(float(value) for value in re.findall(pattern, body))


@pytest.mark.django_db
def test_every_scrape_counts_the_requests_of_every_gunicorn_worker(tmp_path):
    [web] = [o for o in helm_template() if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-web")]
    command = list(web["spec"]["template"]["spec"]["containers"][0]["command"])
    assert "portal/gunicorn_config.py" in command
    port = _free_port()
    command[0] = str(Path(sys.executable).parent / command[0])
    command[command.index("0.0.0.0:8000")] = f"127.0.0.1:{port}"

    db = connections["default"].settings_dict
    secrets = {
        "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "DJANGO_SECRET_KEY": "x7-Qm2v9-production-like-secret-key-of-sufficient-length-and-variety-41",
        "RESERVOIR_METRICS_TOKEN": TOKEN,
    }
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "RESERVOIR_"))}
    env.update(web_environment(secrets, {"status.podIP": "127.0.0.1", "metadata.namespace": "reservoir"}))
    multiproc = tmp_path / "multiproc"  # in the pod: the config's default under /tmp
    multiproc.mkdir()
    env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc)
    subprocess.run([sys.executable, "-c", PREVIOUS_RUN], check=True, env=env, cwd=tmp_path)
    assert list(multiproc.glob("histogram_*.db"))

    log = (tmp_path / "gunicorn.log").open("w")
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        served = 0
        for _ in range(150):
            try:
                _get(port, "/healthz")
                served += 1
                break
            except OSError:
                time.sleep(0.2)
        assert served, (tmp_path / "gunicorn.log").read_text()
        with ThreadPoolExecutor(max_workers=12) as clients:
            served += sum(1 for _ in clients.map(lambda _: _get(port, "/healthz"), range(90)))
        workers_files = list(multiproc.glob("histogram_*.db"))
        assert len(workers_files) >= 2, f"the requests did not spread over the workers: {workers_files}"

        scrapes = [_get(port, "/metrics", TOKEN) for _ in range(6)]
        assert [_healthz_count(body) for body in scrapes] == [served] * 6
        assert "left-by-a-previous-run" not in scrapes[0]  # emptied when the server started
        assert "reservoir_jobs{" in scrapes[0]  # the gauges read at scrape time are there too
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        log.close()
