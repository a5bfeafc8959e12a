"""Putting a topology's fake nodes, StorageClass and PersistentVolumes into a running control plane, and waiting
until the nodes are Ready and schedulable."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from devcluster import topology as topology_module
from devcluster.processes import node_usable


class ClusterError(RuntimeError):
    """The cluster could not be started or is not healthy; the message says which component and why."""


class NodesAndStorage:
    """The node and storage steps of a `Cluster` (devcluster/launcher.py); they use its `api()`, `progress` and
    `log_path`."""

    def apply_topology(self, topology: topology_module.Topology, *, timeout: float | None = None) -> float:
        """Create the topology's nodes that are missing and wait until every one is Ready and schedulable
        (the not-ready taint lifted). Returns the seconds the wait took."""
        api = self.api()
        started = time.monotonic()
        code, body = api.request("GET", "/api/v1/nodes")
        if code != 200:
            raise ClusterError(f"cannot list nodes: HTTP {code}: {body}")
        existing = {node["metadata"]["name"] for node in body.get("items", [])}
        wanted = topology.node_manifests()
        missing = [node for node in wanted if node["metadata"]["name"] not in existing]
        if missing:
            self.progress(f"creating {len(missing)} nodes ({topology.source})")

            def create(node: dict[str, Any]) -> None:
                code, body = api.request("POST", "/api/v1/nodes", node)
                if code not in (201, 409):
                    raise ClusterError(f"cannot create node {node['metadata']['name']}: HTTP {code}: {body}")

            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(create, missing))
        self.apply_storage(topology)
        names = {node["metadata"]["name"] for node in wanted}
        timeout = timeout if timeout is not None else 60 + len(names) / 10
        deadline = time.monotonic() + timeout
        last_report = 0.0
        while True:
            code, body = api.request("GET", "/api/v1/nodes")
            usable = {node["metadata"]["name"] for node in body.get("items", []) if node_usable(node)}
            ready = len(names & usable)
            now = time.monotonic()
            if ready == len(names):
                self.progress(f"{ready} nodes Ready in {now - started:.1f}s")
                return now - started
            if now > deadline:
                raise ClusterError(
                    f"only {ready}/{len(names)} nodes Ready and untainted after {timeout:.0f}s; "
                    f"see {self.log_path('kwok')} and {self.log_path('kube-controller-manager')}"
                )
            if now - last_report > 5:
                last_report = now
                self.progress(f"waiting for nodes: {ready}/{len(names)} Ready")
            time.sleep(0.25)

    def apply_storage(self, topology: topology_module.Topology) -> int:
        """Create the topology's StorageClass and PersistentVolumes that are missing (existing ones, bound or not,
        are left as they are, but for their labels: a volume assigned to a team since it was made gets the label).
        Returns how many were created."""
        api = self.api()
        created = 0
        for manifest in topology.storage_manifests():
            path = (
                "/apis/storage.k8s.io/v1/storageclasses"
                if manifest["kind"] == "StorageClass"
                else "/api/v1/persistentvolumes"
            )
            code, body = api.request("POST", path, manifest)
            if code == 409 and manifest["kind"] == "PersistentVolume":
                labels = {"metadata": {"labels": manifest["metadata"]["labels"]}}
                code, body = api.request(
                    "PATCH",
                    f"{path}/{manifest['metadata']['name']}",
                    labels,
                    content_type="application/merge-patch+json",
                )
                code = 409 if code == 200 else code
            if code not in (201, 409):
                raise ClusterError(
                    f"cannot create {manifest['kind']} {manifest['metadata']['name']}: HTTP {code}: {body}"
                )
            created += code == 201
        if created:
            self.progress(f"created {created} storage objects ({topology.source})")
        return created
