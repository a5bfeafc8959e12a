"""pytest fixtures for tests that need a real Kubernetes API: ``kube_cluster`` (session) and ``kube_namespace``.

``kube_cluster`` uses the cluster ``$KUBECONFIG`` points at when it answers; otherwise it starts (building the
binaries first if they are missing) a local control plane with the demo topology and Kueue in
``<repo>/.state/devcluster-test``, or reuses the one already healthy there, so repeated runs start in about a
second. A cluster this session started is left running for the next run, unless ``CI`` or
``RESERVOIR_DEVCLUSTER_TEARDOWN=1`` is set. If the cluster cannot be built or started, or Kueue is not healthy
(local: its process answers /readyz and its webhooks are registered; ``$KUBECONFIG``'s: Kueue's CRDs are
Established and its ClusterQueue API answers), every test that needs it fails with the reason: none is skipped.

Register with ``pytest_plugins = ["devcluster.pytest_plugin"]`` in the root conftest.py.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from devcluster import kueue, launcher

TEST_STATE_DIR = launcher.REPO_ROOT / ".state" / "devcluster-test"


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs the real Kubernetes control plane (kube_cluster fixture)")


@dataclass
class KubeCluster:
    """What a test needs of the cluster: its kubeconfig and a client."""

    kubeconfig_path: Path
    started_here: bool = False
    cluster: launcher.Cluster | None = None

    def api_client(self):
        """A fresh kubernetes.client.ApiClient (each carries its own connection pool)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))


def _kubeconfig_reachable(path: str) -> str | None:
    """None when the cluster of this kubeconfig answers /readyz, else why not."""
    try:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=path)
        api_client.configuration.retries = 0
        try:
            client.VersionApi(api_client).get_code(_request_timeout=5)
        finally:
            api_client.close()
    except Exception as error:  # noqa: BLE001 - any failure means "not usable"
        return f"{type(error).__name__}: {error}"
    return None


def _kueue_problem_at(path: str) -> str | None:
    """None when Kueue's CRDs are Established and its ClusterQueue API answers on the cluster of ``path``."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=path)
    try:
        extensions = client.ApiextensionsV1Api(api_client)
        for name in kueue.REQUIRED_CRDS:
            try:
                crd = extensions.read_custom_resource_definition(name, _request_timeout=10)
            except client.ApiException as error:
                return f"CRD {name}: HTTP {error.status} (is Kueue installed?)"
            conditions = crd.status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conditions):
                return f"CRD {name} is not Established"
        try:
            client.CustomObjectsApi(api_client).list_cluster_custom_object(
                kueue.GROUP, kueue.VERSION, "clusterqueues", limit=1, _request_timeout=10
            )
        except client.ApiException as error:
            return f"listing {kueue.GROUP}/{kueue.VERSION} clusterqueues: HTTP {error.status} {error.reason}"
    finally:
        api_client.close()
    return None


def _report(message: str) -> None:
    print(f"[devcluster] {message}", flush=True)


def _start_cluster() -> KubeCluster:
    configured = os.environ.get("KUBECONFIG")
    if configured and Path(configured).is_file():
        problem = _kubeconfig_reachable(configured)
        if problem is None:
            kueue_problem = _kueue_problem_at(configured)
            if kueue_problem is not None:
                raise RuntimeError(f"Kueue is not usable on the cluster of KUBECONFIG={configured}: {kueue_problem}")
            return KubeCluster(Path(configured))
        _report(f"KUBECONFIG={configured} does not answer ({problem}); starting the test cluster instead")
    # Kueue records its admission decisions in the test cluster's log (logs/kueue.log), for failed tests to show.
    os.environ.setdefault(kueue.LOG_LEVEL_VARIABLE, "2")
    cluster = launcher.Cluster(TEST_STATE_DIR, progress=_report)
    started = cluster.up()
    component = next(c for c in cluster.status(count_nodes=False).components if c.name == kueue.NAME)
    if not component.healthy:
        raise RuntimeError(f"Kueue is not healthy in {TEST_STATE_DIR} ({component.detail}); see {component.log}")
    return KubeCluster(cluster.kubeconfig_path, started_here=started, cluster=cluster)


@pytest.fixture(scope="session")
def kube_cluster():
    """The Kubernetes cluster for this test session (see the module docstring)."""
    try:
        cluster = _start_cluster()
    except Exception as error:  # noqa: BLE001 - turn any start failure into a failed test with its reason
        pytest.fail(
            f"the development Kubernetes cluster (with Kueue) could not be built or started: {error}", pytrace=False
        )
    yield cluster
    teardown = os.environ.get("CI") or os.environ.get("RESERVOIR_DEVCLUSTER_TEARDOWN") == "1"
    if cluster.started_here and cluster.cluster is not None and teardown:
        cluster.cluster.down()


def _namespace_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "test"
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def kube_namespace(kube_cluster, request):
    """A fresh namespace for one test, with its default ServiceAccount in place; deleted afterwards."""
    from kubernetes import client

    api_client = kube_cluster.api_client()
    core = client.CoreV1Api(api_client)
    name = _namespace_name(request)
    core.create_namespace({"metadata": {"name": name, "labels": {"reservoir.dev/test": "true"}}})
    deadline = time.monotonic() + 30
    while True:  # pods are refused until the ServiceAccount controller has made `default`
        try:
            core.read_namespaced_service_account("default", name)
            break
        except client.ApiException as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except client.ApiException as error:
        if error.status != 404:
            raise
    finally:
        api_client.close()
