"""The chart against the real API server of the local cluster (kube-apiserver with --authorization-mode=Node,RBAC
and Kueue's CRDs): every object it renders passes a server-side dry run, every pod it would run is admitted by the
`restricted` Pod Security Standard, and each ServiceAccount's token is refused what no process of the portal may do.
The whole path run by processes holding only those tokens is in test_least_privilege_path.py."""

import json
import subprocess

import pytest
import yaml

from tests.clusterkit import wait_for
from tests.deploy.chartkit import Release, can_i, kubectl

pytestmark = pytest.mark.cluster

COMPONENTS = ("web", "worker", "sync", "beat", "outbox", "migrate")
TEAM_NAMESPACE = "team-llm"


@pytest.fixture(scope="module")
def release(kube_cluster, tmp_path_factory):
    installed = Release(
        admin=kube_cluster.kubeconfig_path,
        directory=tmp_path_factory.mktemp("release"),
        set_values=("ingress.enabled=true",),
    )
    installed.create_namespace()
    installed.install_rbac()
    yield installed
    installed.uninstall()


def test_every_object_passes_a_server_side_dry_run_and_every_pod_the_restricted_standard(release):
    kinds = {obj["kind"] for obj in release.objects}
    assert {"Deployment", "Job", "Service", "Ingress", "PodDisruptionBudget", "ClusterRole", "Role"} <= kinds
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    result = release.apply(release.objects, "--dry-run=server")
    assert "would violate PodSecurity" not in result.stderr, result.stderr
    assert result.stdout.count("(server dry run)") == len(release.objects)
    # Pod Security Admission enforces on pods: each pod the Deployments and the hook Job would create, as a Pod.
    templates = release.of_kind("Deployment", "Job")
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{obj['metadata']['name']}-probe",
                "labels": obj["spec"]["template"]["metadata"]["labels"],
            },
            "spec": obj["spec"]["template"]["spec"],
        }
        for obj in templates
    ]
    admitted = release.apply(pods, "--dry-run=server")
    assert admitted.stdout.count("(server dry run)") == len(templates) == 7  # six Deployments and the hook Job
    # The standard is really enforced there: a pod that keeps its capabilities is refused.
    container = {**pods[0]["spec"]["containers"][0], "securityContext": {"runAsNonRoot": True}}
    loose = {**pods[0], "metadata": {"name": "loose"}, "spec": {**pods[0]["spec"], "containers": [container]}}
    refused = release.apply([loose], "--dry-run=server", check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr


# What no token of the portal may do, whatever the process: (verb, resource, namespace: a name, "*" for every
# namespace, None for cluster-scoped).
REFUSED_TO_ALL = [
    ("get", "secrets", "kube-system"),
    ("list", "secrets", "*"),
    ("list", "secrets", TEAM_NAMESPACE),
    ("watch", "secrets", TEAM_NAMESPACE),
    ("delete", "nodes", None),
    ("create", "nodes", None),
    ("create", "clusterrolebindings", None),
    ("create", "clusterroles", None),
    ("escalate", "clusterroles", None),
    ("bind", "clusterroles/cluster-admin", None),
    ("impersonate", "serviceaccounts", "*"),
    ("create", "pods", TEAM_NAMESPACE),
    ("create", "pods/exec", TEAM_NAMESPACE),
    ("create", "pods/attach", TEAM_NAMESPACE),
    ("create", "pods/portforward", TEAM_NAMESPACE),
    ("create", "serviceaccounts/token", "*"),
    ("delete", "namespaces", None),
    ("create", "deployments.apps", TEAM_NAMESPACE),
    ("create", "daemonsets.apps", "kube-system"),
    ("update", "configmaps", "kube-system"),
    ("delete", "persistentvolumeclaims", TEAM_NAMESPACE),
    ("delete", "persistentvolumes", None),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io", None),
    ("update", "validatingwebhookconfigurations.admissionregistration.k8s.io", None),
]
# And per process, what it must not do although a neighbour may.
REFUSED = {
    "web": [("create", "jobs.batch", TEAM_NAMESPACE), ("create", "namespaces", None), ("list", "nodes", None)],
    "worker": [("get", "secrets", TEAM_NAMESPACE), ("delete", "jobs.batch", "kube-system"), ("watch", "pods", "*")],
    "sync": [("create", "jobs.batch", TEAM_NAMESPACE), ("patch", "pods", "kube-system"), ("update", "nodes", None)],
    "beat": [("list", "nodes", None), ("list", "pods", "*")],
    "outbox": [("list", "nodes", None), ("list", "pods", "*")],
    "migrate": [("list", "nodes", None), ("list", "namespaces", None)],
}
# What each must be allowed cluster-wide from the chart alone (team-namespace rights come from the portal's
# RoleBindings, proven in test_least_privilege_path.py).
ALLOWED = {
    "web": [("list", "storageclasses.storage.k8s.io", None)],
    "worker": [
        ("create", "namespaces", None),
        # Pool isolation reads a node, then adds its pool's missing taints (reconcile/taints.py).
        ("get", "nodes", None),
        ("patch", "nodes", None),
        ("list", "clusterqueues.kueue.x-k8s.io", None),
    ],
    "sync": [("watch", "pods", "*"), ("watch", "workloads.kueue.x-k8s.io", "*"), ("watch", "nodes", None)],
}


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_token_is_refused_what_no_process_of_the_portal_may_do(release, component):
    kubeconfig = release.kubeconfig(component)
    allowed = [check for check in REFUSED_TO_ALL + REFUSED[component] if can_i(kubeconfig, *check)]
    assert allowed == [], f"{component} may do what it must not: {allowed}"
    missing = [check for check in ALLOWED.get(component, []) if not can_i(kubeconfig, *check)]
    assert missing == [], f"{component} lacks: {missing}"
    # And for real, not only as the authorizer says: reading kube-system's Secrets answers 403.
    result = kubectl(kubeconfig, "get", "secrets", "-n", "kube-system", check=False)
    assert result.returncode != 0 and "Forbidden" in result.stderr, result.stderr


def test_the_sync_may_write_its_own_lease_and_no_other(release):
    kubeconfig = release.kubeconfig("sync")
    lease = f"{release.fullname}-sync"
    assert can_i(kubeconfig, "update", f"leases.coordination.k8s.io/{lease}", namespace=release.namespace)
    assert can_i(kubeconfig, "create", "leases.coordination.k8s.io", namespace=release.namespace)
    assert not can_i(kubeconfig, "update", "leases.coordination.k8s.io/kube-scheduler", namespace=release.namespace)
    assert not can_i(kubeconfig, "update", "leases.coordination.k8s.io/kube-scheduler", namespace="kube-system")
    assert not can_i(kubeconfig, "create", "leases.coordination.k8s.io", namespace="kube-node-lease")


def test_the_worker_may_bind_only_the_team_roles_in_team_namespaces(release, kube_namespace):
    """RBAC's escalation check refuses a binding that grants what the worker does not hold; the chart's admission
    policy refuses the rest: a team role outside team namespaces, or any other role (its own ClusterRole too, which
    RBAC alone would let it bind, since it holds those rights)."""
    kubeconfig = release.kubeconfig("worker")
    account = {"kind": "ServiceAccount", "name": release.service_account("worker"), "namespace": release.namespace}
    team_namespace = f"team-{release.name}"
    kubectl(release.admin, "create", "namespace", team_namespace)

    def bind(role: str, namespace: str, subject: dict = account) -> subprocess.CompletedProcess:
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"probe-{role.replace(':', '-')}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject],
        }
        made = kubectl(kubeconfig, "create", "-f", "-", stdin=yaml.safe_dump(binding), check=False)
        if made.returncode == 0:  # clean up at once: only the answer matters here
            kubectl(release.admin, "delete", "rolebinding", binding["metadata"]["name"], "-n", namespace)
        return made

    team_role = f"{release.fullname}-team-worker"
    try:
        # The policy takes a moment to reach the API server's admission after it is stored.
        wait_for(
            lambda: "binds only its team roles" in bind(team_role, kube_namespace).stderr,
            timeout=30,
            what="the admission policy to refuse a team role outside team namespaces",
        )
        made = bind(team_role, team_namespace)
        assert made.returncode == 0, made.stderr
        # Each team role to its own process's account only: not the web's role to the worker, nor to everyone.
        web_to_worker = bind(f"{release.fullname}-team-web", team_namespace)
        assert web_to_worker.returncode != 0 and "its own process's account" in web_to_worker.stderr
        everyone = {"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}
        to_everyone = bind(team_role, team_namespace, everyone)
        assert to_everyone.returncode != 0 and "its own process's account" in to_everyone.stderr
        own = bind(f"{release.fullname}-worker", team_namespace)
        assert own.returncode != 0 and "binds only its team roles" in own.stderr, own.stderr
        for role in ("cluster-admin", "admin", "edit", "view", "system:controller:namespace-controller"):
            refused = bind(role, team_namespace)
            assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (role, refused.stderr)
    finally:
        kubectl(release.admin, "delete", "namespace", team_namespace, "--wait=false", check=False)


def test_the_worker_creates_and_changes_only_team_namespaces(release):
    """RBAC's `create namespaces` cannot name them: the chart's admission policy keeps the worker's token to the team
    namespaces, so that it cannot relabel another (kube-system's Pod Security labels, the release's own)."""
    kubeconfig = release.kubeconfig("worker")
    team_namespace = f"team-{release.name}-made"
    try:
        # (a server-side dry run: admission answers, nothing is stored)
        probe = ("create", "namespace", "probe-other", "--dry-run=server")
        wait_for(
            lambda: "only team namespaces" in kubectl(kubeconfig, *probe, check=False).stderr,
            timeout=30,
            what="the admission policy to refuse a namespace outside the team prefix",
        )
        made = kubectl(kubeconfig, "create", "namespace", team_namespace, check=False)
        assert made.returncode == 0, made.stderr
        labelled = kubectl(kubeconfig, "label", "namespace", team_namespace, "reservoir.io/probe=yes", check=False)
        assert labelled.returncode == 0, labelled.stderr
        for other in (release.namespace, "kube-system", "default"):
            refused = kubectl(
                kubeconfig,
                "label",
                "namespace",
                other,
                "pod-security.kubernetes.io/enforce=privileged",
                "--overwrite",
                check=False,
            )
            assert refused.returncode != 0 and "only team namespaces" in refused.stderr, (other, refused.stderr)
        labels = json.loads(kubectl(release.admin, "get", "namespace", "kube-system", "-o", "json").stdout)
        assert "pod-security.kubernetes.io/enforce" not in labels["metadata"].get("labels", {})
    finally:
        kubectl(release.admin, "delete", "namespace", team_namespace, "--wait=false", "--ignore-not-found", check=False)


def test_the_worker_only_adds_taints_to_nodes(release):
    """Pool isolation adds a pool's taints to its nodes; RBAC's `patch nodes` would let the worker's token also take
    taints off, relabel a node (moving it to another pool) or uncordon it: the chart's admission policy refuses
    those."""
    kubeconfig = release.kubeconfig("worker")
    name = f"probe-{release.name}"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"reservoir.io/probe": "yes"}},
        "spec": {"taints": [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}], "unschedulable": True},
    }
    kubectl(release.admin, "apply", "-f", "-", stdin=yaml.safe_dump(node))

    def patch(body: dict, *extra: str) -> subprocess.CompletedProcess:
        return kubectl(kubeconfig, "patch", "node", name, "--type=merge", "-p", json.dumps(body), *extra, check=False)

    kept = {"key": "maintenance", "value": "yes", "effect": "NoSchedule"}
    added = {"key": "reservoir.io/pool", "value": "a800", "effect": "NoSchedule"}
    try:
        wait_for(
            lambda: "but its taints" in patch({"metadata": {"labels": {"pool": "x"}}}, "--dry-run=server").stderr,
            timeout=30,
            what="the admission policy to refuse a node's relabelling by the worker",
        )
        # As reconcile/taints.py writes: the node's taints as read, plus the pool's, at the version read (the node
        # controller may put its own on this node that never reports: a conflict reads again).
        for _attempt in range(5):
            current = json.loads(kubectl(release.admin, "get", "node", name, "-o", "json").stdout)
            body = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": {"taints": current["spec"]["taints"] + [added]},
            }
            made = patch(body)
            if "the object has been modified" not in made.stderr:
                break
        assert made.returncode == 0, made.stderr
        taken_off = patch({"spec": {"taints": [added]}})
        assert taken_off.returncode != 0 and "takes none off" in taken_off.stderr, taken_off.stderr
        uncordoned = patch({"spec": {"unschedulable": False}})
        assert uncordoned.returncode != 0 and "but its taints" in uncordoned.stderr, uncordoned.stderr
        annotated = patch({"metadata": {"annotations": {"reservoir.io/probe": "yes"}}})
        assert annotated.returncode != 0 and "but its taints" in annotated.stderr, annotated.stderr
        stored = json.loads(kubectl(release.admin, "get", "node", name, "-o", "json").stdout)
        assert kept in stored["spec"]["taints"] and added in stored["spec"]["taints"]
        assert stored["spec"]["unschedulable"] is True
        assert stored["metadata"]["labels"].get("pool") is None
    finally:
        kubectl(release.admin, "delete", "node", name, "--ignore-not-found", check=False)
