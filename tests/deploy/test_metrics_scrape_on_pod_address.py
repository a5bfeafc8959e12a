"""A scraper inside the cluster reaches the web pods' /metrics, as the chart deploys them.

A scraper (Prometheus' kubernetes_sd, a ServiceMonitor) addresses each pod by its IP, so its request carries
`Host: <pod IP>:8000`. The chart used to allow only the public host names (config.allowedHosts): Django refused the
pod address (DisallowedHost, 400) before the view read the bearer token, so the portal's own metrics (outbox backlog,
sync lag, queue depth) were never scraped. The web pod now also allows its own address (RESERVOIR_POD_IP from the
downward API); the token is still required, and other hosts are still refused.

The web container's environment is taken from `helm template` (values as rendered; `fieldRef`s and `$(VAR)`
references resolved as the kubelet does; Secrets given test values) and the requests are made under
`portal.settings.prod` in a separate process, as the pod would serve them."""

import json
import os
import re
import subprocess
import sys

import pytest
from django.db import connections

from tests.deploy.conftest import ROOT, helm_template

TOKEN = "scrape-token-for-the-test"
SCRAPE = """
import json, sys, django
django.setup()
from django.test import Client
answers = [
    Client().get("/metrics", HTTP_HOST=host, **({"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {})).status_code
    for host, token in json.loads(sys.argv[1])
]
print(json.dumps(answers))
"""


def web_environment(secrets: dict[str, str], fields: dict[str, str]) -> dict[str, str]:
    [web] = [
        obj
        for obj in helm_template("--set", "ingress.enabled=true")
        if obj["kind"] == "Deployment" and obj["metadata"]["name"].endswith("-web")
    ]
    resolved: dict[str, str] = {}
    for entry in web["spec"]["template"]["spec"]["containers"][0]["env"]:
        source = entry.get("valueFrom") or {}
        if "value" in entry:
            value = re.sub(r"\$\((\w+)\)", lambda m: resolved.get(m.group(1), m.group(0)), str(entry["value"]))
        elif "fieldRef" in source:
            value = fields[source["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in source:
            value = secrets.get(entry["name"], "")
        else:
            continue
        resolved[entry["name"]] = value
    return resolved


def scrape(pod_ip: str, requests: list[tuple[str, str]]) -> list[int]:
    """The statuses of GET /metrics with each (Host, bearer token) in a web pod whose address is `pod_ip`."""
    db = connections["default"].settings_dict  # this session's test database: migrated, empty
    secrets = {
        "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "DJANGO_SECRET_KEY": "x7-Qm2v9-production-like-secret-key-of-sufficient-length-and-variety-41",
        "RESERVOIR_METRICS_TOKEN": TOKEN,
    }
    fields = {"status.podIP": pod_ip, "metadata.namespace": "reservoir", "metadata.name": "rsv-reservoir-web-0"}
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "RESERVOIR_"))}
    env.update(web_environment(secrets, fields))
    assert env["DJANGO_SETTINGS_MODULE"] == "portal.settings.prod"
    result = subprocess.run(
        [sys.executable, "-c", SCRAPE, json.dumps(requests)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("pod_ip", "host"), [("10.244.3.17", "10.244.3.17:8000"), ("fd00:10:244::17", "[fd00:10:244::17]:8000")]
)
def test_a_scraper_inside_the_cluster_reaches_metrics_on_the_pod_address(pod_ip, host):
    with_token, without_token, another_host = scrape(pod_ip, [(host, TOKEN), (host, ""), ("10.244.9.9:8000", TOKEN)])
    assert with_token == 200, f"GET /metrics with Host {host} answered {with_token}"
    assert without_token == 403  # the token check stays
    assert another_host == 400  # only the pod's own address joins the allowed hosts
