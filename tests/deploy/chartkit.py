"""The Helm chart installed into the real local cluster for the RBAC proof: its objects rendered by `helm template`,
its ServiceAccounts and RBAC applied for real in a namespace of its own, a TokenRequest token per ServiceAccount,
and kubeconfigs that hold only that token (so a process using one has exactly the chart's rights)."""

import json
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from devcluster import build
from tests.deploy.conftest import helm_template

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
# The policy that holds the worker's RoleBindings to the team roles in team namespaces.
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
# Enforced on the release's namespace, so a pod the chart would run that breaks the standard is refused.
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "latest",
}


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(build.binary("kubectl")), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


def as_yaml(objects: list[dict]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


@dataclass
class Release:
    """The chart rendered for release `name` in `namespace`, against the cluster of `admin` (a kubeconfig)."""

    admin: Path
    directory: Path
    name: str = field(default_factory=lambda: f"rsv{uuid.uuid4().hex[:6]}")
    set_values: tuple[str, ...] = ()
    objects: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self.namespace = self.name
        args = [item for value in self.set_values for item in ("--set", value)]
        self.objects = helm_template(*args, release=self.name, namespace=self.namespace)

    @property
    def fullname(self) -> str:
        return f"{self.name}-reservoir"

    def service_account(self, component: str) -> str:
        return f"{self.fullname}-{component}"

    def of_kind(self, *kinds: str) -> list[dict]:
        return [obj for obj in self.objects if obj["kind"] in kinds]

    def deployment(self, component: str) -> dict:
        [found] = [o for o in self.of_kind("Deployment") if o["metadata"]["name"] == f"{self.fullname}-{component}"]
        return found

    def account_of(self, component: str) -> str:
        """The ServiceAccount the component's Deployment runs as, by its component name (the cluster worker runs as
        the worker)."""
        name = self.deployment(component)["spec"]["template"]["spec"]["serviceAccountName"]
        return name.removeprefix(f"{self.fullname}-")

    # -- in the cluster --------------------------------------------------------------------------------------------
    def create_namespace(self) -> None:
        metadata = {"name": self.namespace, "labels": RESTRICTED}
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
        kubectl(self.admin, "apply", "-f", "-", stdin=as_yaml([namespace]))

    def apply(self, objects: list[dict], *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        arguments = ("apply", "--namespace", self.namespace, *extra, "-f", "-")
        return kubectl(self.admin, *arguments, stdin=as_yaml(objects), check=check)

    def install_rbac(self) -> None:
        """The ServiceAccounts, every RBAC object and the admission policy, for real (the hook's ServiceAccount
        too)."""
        self.apply(self.of_kind(*RBAC_KINDS, *ADMISSION_KINDS))

    def token(self, component: str, *, hours: int = 2) -> str:
        """A TokenRequest token of the component's ServiceAccount (`kubectl create token`)."""
        result = kubectl(
            self.admin, "create", "token", self.service_account(component), "-n", self.namespace, f"--duration={hours}h"
        )
        return result.stdout.strip()

    def kubeconfig(self, component: str) -> Path:
        """A kubeconfig for the admin's cluster that holds only the component's token."""
        admin = yaml.safe_load(self.admin.read_text())
        cluster = dict(admin["clusters"][0]["cluster"])
        authority = cluster.pop("certificate-authority", None)
        if authority:
            cluster["certificate-authority"] = str((self.admin.parent / authority).resolve())
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": cluster}],
            "users": [{"name": component, "user": {"token": self.token(component)}}],
            "contexts": [{"name": component, "context": {"cluster": "cluster", "user": component}}],
            "current-context": component,
        }
        path = self.directory / f"kubeconfig-{component}"
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path

    def uninstall(self) -> None:
        """Delete the cluster-wide objects, the RoleBindings the portal made to the team roles in team namespaces
        (the demo teams' namespaces outlive the test), and the namespace."""
        listed = kubectl(self.admin, "get", "rolebindings", "--all-namespaces", "-o", "json", check=False)
        if listed.returncode == 0:
            for binding in json.loads(listed.stdout)["items"]:
                if binding["roleRef"]["name"].startswith(f"{self.fullname}-team-"):
                    where = binding["metadata"]
                    kubectl(self.admin, "delete", "rolebinding", where["name"], "-n", where["namespace"], check=False)
        for obj in self.of_kind("ClusterRole", "ClusterRoleBinding", *ADMISSION_KINDS):
            name = obj["metadata"]["name"]
            kubectl(self.admin, "delete", obj["kind"].lower(), name, "--ignore-not-found", check=False)
        kubectl(self.admin, "delete", "namespace", self.namespace, "--ignore-not-found", "--wait=false", check=False)


def can_i(kubeconfig: Path, verb: str, resource: str, namespace: str | None = None) -> bool:
    """What the API server's authorizer answers for the kubeconfig's user (a SelfSubjectAccessReview): in
    `namespace`, in every namespace ("*"), or cluster-scoped (None)."""
    where = [] if namespace is None else ["--all-namespaces"] if namespace == "*" else ["-n", namespace]
    result = kubectl(kubeconfig, "auth", "can-i", verb, resource, *where, check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), result.stderr
    return answer == "yes"
