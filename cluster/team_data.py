"""Pure rendering of a team's data in its namespace: PersistentVolumeClaims the portal creates, the Secrets it keeps
(image pull credentials and named secrets), and what a job's pod needs to use them. No I/O, no Django.

A team volume is known to the portal by its claim's name, and a team secret by its Secret's name: a job refers to
them by those names, so rendering a job needs no lookup. Secret values pass through `render_*_secret` on their way
to the apiserver and are never kept anywhere else.
"""

import base64
import json
from dataclasses import dataclass

from .labels import LABEL_MANAGED_BY, LABEL_TEAM, MANAGED_BY

DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_KEY = ".dockerconfigjson"
OPAQUE = "Opaque"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"


@dataclass(frozen=True)
class VolumeMount:
    """A team volume (its claim's name) mounted in the job's container."""

    claim_name: str
    mount_path: str
    read_only: bool = True


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable read from one key of a team secret."""

    name: str
    secret: str
    key: str


def _metadata(name: str, namespace: str, team_slug: str) -> dict:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEAM: team_slug},
    }


def render_claim(
    *,
    name: str,
    namespace: str,
    team_slug: str,
    size_gib: int,
    access_mode: str,
    storage_class: str,
    assigned_volumes_only: bool = False,
) -> dict:
    """A PersistentVolumeClaim the portal creates for a team. An empty storage class means the cluster's default.

    `assigned_volumes_only` (for a class whose volumes are made ahead of time, without a provisioner): the claim
    binds only a PersistentVolume labelled with the team (`reservoir.io/team: <slug>`), one an admin assigned to it,
    never another team's or an unassigned one. (A provisioner refuses a claim with a selector, so a class that
    provisions volumes gets none: its volumes are made for the claim.)"""
    spec = {"accessModes": [access_mode], "resources": {"requests": {"storage": f"{size_gib}Gi"}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    if assigned_volumes_only:
        spec["selector"] = {"matchLabels": {LABEL_TEAM: team_slug}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(name, namespace, team_slug),
        "spec": spec,
    }


def _encoded(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def docker_config(*, registry: str, username: str, password: str) -> str:
    """The `.dockerconfigjson` document for one registry (what `kubectl create secret docker-registry` writes)."""
    auth = _encoded(f"{username}:{password}")
    return json.dumps({"auths": {registry: {"username": username, "password": password, "auth": auth}}})


def render_registry_secret(
    *, name: str, namespace: str, team_slug: str, registry: str, username: str, password: str
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": DOCKER_CONFIG_JSON,
        "metadata": _metadata(name, namespace, team_slug),
        "data": {DOCKER_CONFIG_KEY: _encoded(docker_config(registry=registry, username=username, password=password))},
    }


def render_opaque_secret(*, name: str, namespace: str, team_slug: str, values: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": OPAQUE,
        "metadata": _metadata(name, namespace, team_slug),
        "data": {key: _encoded(value) for key, value in sorted(values.items())},
    }


def shm_quantity(gib: int) -> str:
    return f"{gib}Gi"


def add_team_data(
    pod_spec: dict,
    container: dict,
    *,
    volumes: tuple[VolumeMount, ...] = (),
    shm_gib: int = 0,
    image_pull_secrets: tuple[str, ...] = (),
    secret_env: tuple[SecretEnv, ...] = (),
) -> None:
    """Give a pod template its team volumes, shared memory, image pull secrets and environment from secrets
    (in place). Pod volume names are `vol-<n>` in the order given, so the same spec always renders the same pod."""
    pod_volumes = []
    mounts = []
    for index, mount in enumerate(volumes):
        volume_name = f"vol-{index}"
        pod_volumes.append(
            {
                "name": volume_name,
                "persistentVolumeClaim": {"claimName": mount.claim_name, "readOnly": mount.read_only},
            }
        )
        mounts.append({"name": volume_name, "mountPath": mount.mount_path, "readOnly": mount.read_only})
    if shm_gib:
        # tmpfs pages count against the container's memory limit: the spec checks that the job's memory covers it.
        pod_volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_quantity(shm_gib)}})
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
    if pod_volumes:
        pod_spec["volumes"] = [*pod_spec.get("volumes", []), *pod_volumes]
        container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in image_pull_secrets]
    if secret_env:
        container["env"] = [
            *container.get("env", []),
            *(
                {"name": item.name, "valueFrom": {"secretKeyRef": {"name": item.secret, "key": item.key}}}
                for item in sorted(secret_env, key=lambda item: item.name)
            ),
        ]


@dataclass(frozen=True)
class ClaimFacts:
    """What the portal reads of a PersistentVolumeClaim."""

    namespace: str
    name: str
    phase: str  # Pending, Bound or Lost
    capacity: str = ""
    access_modes: tuple[str, ...] = ()
    storage_class: str = ""
    managed: bool = False  # carries the portal's label: the portal created it


def claim_facts(obj: dict) -> ClaimFacts:
    """From a claim as the apiserver returns it (JSON, camelCase)."""
    metadata, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return ClaimFacts(
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        phase=status.get("phase") or "Pending",
        capacity=(status.get("capacity") or {}).get("storage", ""),
        access_modes=tuple(status.get("accessModes") or spec.get("accessModes") or ()),
        storage_class=spec.get("storageClassName") or "",
        managed=(metadata.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY,
    )
