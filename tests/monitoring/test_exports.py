"""export_manifests: seed 003's artefacts from the portal's rows, and the PodDisruptionBudget lint."""

import io
import shutil
import subprocess
from decimal import Decimal

import pytest
import yaml
from django.core.management import call_command

from monitoring import services
from monitoring.choices import AlertKind
from monitoring.pdb_lint import lint
from pools.services import set_quota
from tests.factories import NodeFactory, PoolFactory

POOLS = [
    {
        "slug": "inference",
        "node_selector": {"node-role": "inference"},
        "taints": [{"key": "workload", "value": "inference"}],
    }
]


def deployment(name, *, replicas=3, labels=None, on_pool=True, namespace="ai-prod"):
    spec = {"nodeSelector": {"node-role": "inference"}} if on_pool else {}
    return {
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": labels or {"app": name}}, "spec": spec}},
    }


def pdb(name, selector, **spec):
    return {"kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "ai-prod"},
            "spec": {"selector": {"matchLabels": selector}, **spec}}  # fmt: skip


def hpa(target, min_replicas):
    return {
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"{target}-hpa", "namespace": "ai-prod"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": target}, "minReplicas": min_replicas},
    }


@pytest.mark.parametrize(
    ("budget", "min_replicas", "flagged"),
    [
        ({"minAvailable": 2}, 2, True),  # the seed's example: equal to minReplicas blocks scale-down
        ({"minAvailable": 3}, 2, True),
        ({"minAvailable": 1}, 2, False),
        ({"maxUnavailable": 1}, 2, False),  # the seed's fix
        ({"maxUnavailable": 0}, 2, True),
        ({"minAvailable": "100%"}, 4, True),
        ({"minAvailable": "50%"}, 4, False),
        ({"minAvailable": "60%"}, 2, True),  # 1.2 pods rounds up to 2
    ],
)
def test_pdb_lint_flags_budgets_at_or_above_the_hpa_floor(budget, min_replicas, flagged):
    findings = lint(
        pdbs=[pdb("llm-pdb", {"app": "llm"}, **budget)],
        hpas=[hpa("llm", min_replicas)],
        workloads=[deployment("llm")],
        pools=POOLS,
    )
    assert bool(findings) == flagged
    if flagged:
        assert findings[0].pool == "inference" and findings[0].workload == "Deployment/llm"


def test_pdb_lint_ignores_workloads_off_the_pools_and_pdbs_that_select_nothing():
    pdbs = [pdb("web-pdb", {"app": "web"}, minAvailable=2), pdb("stray", {"app": "nothing"}, minAvailable=5)]
    assert lint(pdbs=pdbs, hpas=[hpa("web", 2)], workloads=[deployment("web", on_pool=False)], pools=POOLS) == []
    # Without an HPA the floor is the workload's replicas.
    findings = lint(
        pdbs=[pdb("web-pdb", {"app": "web"}, minAvailable=3)], hpas=[], workloads=[deployment("web")], pools=POOLS
    )
    assert len(findings) == 1 and "3 replicas" in findings[0].problem


@pytest.mark.django_db
def test_export_manifests_writes_seed_003_artefacts_from_the_portal(tmp_path, team):
    pool = PoolFactory(slug="inference", node_selector={"node-role": "inference"}, min_nodes=2, max_nodes=10,
                       taints=[{"key": "workload", "value": "inference", "effect": "NoSchedule"}])  # fmt: skip
    NodeFactory(name="gpu-node-01", pool=pool)
    set_quota(team=team, pool=pool, max_gpus=4)
    services.set_rule(kind=AlertKind.GPU_TEMPERATURE_HIGH, threshold=Decimal(80), for_seconds=60, pool=pool)
    workloads = tmp_path / "workloads.yaml"
    workloads.write_text(
        yaml.safe_dump_all([deployment("llm"), hpa("llm", 2), pdb("llm-pdb", {"app": "llm"}, minAvailable=2)])
    )
    out = io.StringIO()
    call_command("export_manifests", output=tmp_path / "out", workloads=[workloads], stdout=out)
    result = tmp_path / "out"

    commands = (result / "node-labels-and-taints.sh").read_text()
    assert "kubectl label node gpu-node-01 node-role=inference --overwrite" in commands
    assert "kubectl taint node gpu-node-01 workload=inference:NoSchedule --overwrite" in commands
    namespace = list(yaml.safe_load_all((result / "namespaces" / f"{team.namespace}.yaml").read_text()))
    kinds = ["Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy", "NetworkPolicy"]
    assert [doc["kind"] for doc in namespace] == kinds
    assert namespace[1]["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    autoscaler = list(yaml.safe_load_all((result / "cluster-autoscaler.yaml").read_text()))[0]
    assert yaml.safe_load(autoscaler["data"]["nodes"]) == [
        {"name": "inference-nodepool", "minSize": 2, "maxSize": 10, "expanderStrategy": "least-waste"}
    ]
    dcgm = list(yaml.safe_load_all((result / "dcgm-exporter.yaml").read_text()))
    tolerations = dcgm[1]["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "workload", "operator": "Equal", "value": "inference", "effect": "NoSchedule"} in tolerations
    rule = yaml.safe_load((result / "prometheus-rule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    temperature = next(g for g in rule["spec"]["groups"] if g["name"] == "reservoir-gpu-temperature-high")["rules"]
    exprs = {r["labels"]["scope"]: (r["expr"], r["for"]) for r in temperature}
    assert exprs["pool inference"] == ('DCGM_FI_DEV_GPU_TEMP{Hostname=~"gpu-node-01"} > 80', "1m")
    assert exprs["default"] == ('DCGM_FI_DEV_GPU_TEMP{Hostname!~"gpu-node-01"} > 85', "2m")
    assert "llm-pdb" in (result / "pdb-lint.txt").read_text()
    assert "block scale-down" in out.getvalue()

    # Prometheus' own checker accepts the rules file.
    promtool = shutil.which("promtool")
    assert promtool, "promtool comes with Debian's prometheus package (scripts/services.sh installs it)"
    check = subprocess.run(
        [promtool, "check", "rules", str(result / "prometheus-rules.yml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.django_db
def test_the_portal_serves_its_own_metrics(client, team):
    client.get("/healthz")
    body = client.get("/metrics").content.decode()
    assert 'reservoir_jobs{state="queued"} 0.0' in body
    assert "reservoir_http_request_duration_seconds_bucket" in body and 'route="healthz"' in body
    assert 'reservoir_celery_queue_depth{queue="default"}' in body
