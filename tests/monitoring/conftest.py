"""Fixtures for monitoring tests: a real Prometheus scraping the fake DCGM exporter of the test cluster, and a
webhook receiver on 127.0.0.1 that records what the portal POSTs."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from devcluster.monitoring import Monitoring


@pytest.fixture(scope="session")
def prometheus(kube_cluster):
    """Prometheus (Debian's) scraping the DCGM exporter every second, beside the session's cluster."""
    state_dir = kube_cluster.cluster.state_dir if kube_cluster.cluster else kube_cluster.kubeconfig_path.parent
    stack = Monitoring(state_dir, progress=lambda message: print(f"[monitoring] {message}", flush=True))
    try:
        stack.up(kube_cluster.kubeconfig_path, scrape_interval=1.0)
    except Exception as error:  # noqa: BLE001 - a failure to start is a failed test with its reason
        pytest.fail(f"Prometheus and the DCGM exporter could not be started: {error}", pytrace=False)
    yield stack
    # Left running for the next session like the cluster itself; `devcluster down` stops both.


@pytest.fixture
def portal_prometheus(prometheus, settings):
    settings.PROMETHEUS_URL = prometheus.prometheus_url
    settings.MONITORING_STEP_SECONDS = 1
    return prometheus


class WebhookReceiver:
    def __init__(self):
        self.received: list[dict] = []
        self.status = 200
        received, receiver = self.received, self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format, *args):  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def statuses(self) -> list[str]:
        return [payload["status"] for payload in self.received]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook(settings):
    receiver = WebhookReceiver()
    settings.ALERT_WEBHOOK_URL = receiver.url
    yield receiver
    receiver.close()
