"""The Helm chart rendered with `helm template` (helm is built into the control plane's cache when missing)."""

import subprocess
from pathlib import Path

import pytest
import yaml

from devcluster import build

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "reservoir"


def helm_template(*args: str, release: str = "rsv", namespace: str = "reservoir") -> list[dict]:
    """The chart's objects as `helm template` renders them, with `args` (e.g. --set ...)."""
    helm = build.ensure_helm()
    result = subprocess.run(
        [str(helm), "template", release, str(CHART), "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def pod_specs(objects: list[dict]) -> dict[str, dict]:
    """The pod spec of every Deployment and Job, by "<kind>/<name>"."""
    return {
        f"{obj['kind']}/{obj['metadata']['name']}": obj["spec"]["template"]["spec"]
        for obj in objects
        if obj["kind"] in ("Deployment", "Job")
    }


@pytest.fixture(scope="session")
def rendered_chart() -> list[dict]:
    return helm_template("--set", "ingress.enabled=true")
