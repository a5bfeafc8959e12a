"""Pools of fake GPU nodes, read from a YAML file and turned into Node objects that KWOK manages.

A topology file has optional ``defaults`` (capacity, allocatable, labels) and a list of ``pools``; each pool names
its nodes explicitly (``nodes: [gpu-node-01, ...]``) or by ``count`` and ``namePrefix``, and gives labels, taints,
the GPU model and the node shape. ``scaled(n)`` grows or shrinks the same pools to n nodes in all, keeping their
proportions, for benchmarks.

An optional ``storage`` section gives the cluster a StorageClass and pre-provisioned PersistentVolumes (``local``
volumes whose node affinity the scheduler's volume binding checks on the fake nodes), so team volumes bind for
real: there is no dynamic provisioner, and the PV controller of kube-controller-manager does the binding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

DEFAULT_TOPOLOGY = Path(__file__).with_name("topologies") / "demo.yaml"

GPU_RESOURCE = "nvidia.com/gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
POOL_LABEL = "reservoir.dev/devcluster-pool"
VALID_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


class TopologyError(ValueError):
    """The topology file is malformed; the message says where."""


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    def manifest(self) -> dict[str, str]:
        taint = {"key": self.key, "effect": self.effect}
        if self.value:
            taint["value"] = self.value
        return taint


@dataclass(frozen=True)
class Pool:
    name: str
    node_names: tuple[str, ...]
    gpu_model: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    capacity: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    name_prefix: str = ""

    @property
    def gpus_per_node(self) -> int:
        return int(self.allocatable.get(GPU_RESOURCE, "0"))

    def node_manifest(self, node_name: str) -> dict[str, Any]:
        """The Node object for one member of this pool, status included (the API server keeps a Node's status
        on create, as it does when a kubelet registers)."""
        gpu_count = self.capacity.get(GPU_RESOURCE, "0")
        labels = {
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            POOL_LABEL: self.name,
            "gpu-count": gpu_count,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": gpu_count,
            "nvidia.com/gpu.product": self.gpu_model,
            **self.labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node_name,
                "labels": labels,
                "annotations": {
                    KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
                    "node.alpha.kubernetes.io/ttl": "0",
                },
            },
            "spec": {"taints": [taint.manifest() for taint in self.taints]},
            "status": {
                "capacity": dict(self.capacity),
                "allocatable": dict(self.allocatable),
                "phase": "Pending",
            },
        }


@dataclass(frozen=True)
class Volume:
    """A pre-provisioned PersistentVolume of the topology's storage class."""

    name: str
    capacity: str
    access_modes: tuple[str, ...] = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany")
    labels: tuple[tuple[str, str], ...] = ()  # e.g. (("reservoir.io/team", "llm"),): the team it is assigned to


@dataclass(frozen=True)
class Storage:
    """A StorageClass without a provisioner, and the PersistentVolumes made for it ahead of time.

    ``Immediate`` binding (the default here): the PV controller binds a claim as soon as a volume fits, so the
    portal can say at once whether a team's claim is bound, and a pod whose claim is not bound stays Pending with
    the scheduler's "unbound immediate PersistentVolumeClaims"; each volume's node affinity (``nodeLabel``, a label
    every node that can reach it carries) is still checked by the scheduler's VolumeBinding filter."""

    class_name: str
    volumes: tuple[Volume, ...] = ()
    binding_mode: str = "Immediate"
    node_label: str = "nvidia.com/gpu.present"
    path_prefix: str = "/var/lib/reservoir-devcluster/volumes"

    def manifests(self) -> list[dict[str, Any]]:
        storage_class = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": self.class_name},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": self.binding_mode,
            "reclaimPolicy": "Retain",
        }
        volumes = [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "name": volume.name,
                    "labels": {"reservoir.dev/devcluster-volume": "true", **dict(volume.labels)},
                },
                "spec": {
                    "capacity": {"storage": volume.capacity},
                    "accessModes": list(volume.access_modes),
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": self.class_name,
                    "local": {"path": f"{self.path_prefix}/{volume.name}"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": self.node_label, "operator": "Exists"}]}
                            ]
                        }
                    },
                },
            }
            for volume in self.volumes
        ]
        return [storage_class, *volumes]


@dataclass(frozen=True)
class Topology:
    pools: tuple[Pool, ...]
    source: str = "<memory>"
    storage: Storage | None = None

    def storage_manifests(self) -> list[dict[str, Any]]:
        """The StorageClass and PersistentVolumes to create (none without a storage section)."""
        return self.storage.manifests() if self.storage else []

    @property
    def node_count(self) -> int:
        return sum(len(pool.node_names) for pool in self.pools)

    @property
    def gpu_count(self) -> int:
        return sum(len(pool.node_names) * pool.gpus_per_node for pool in self.pools)

    def node_manifests(self) -> list[dict[str, Any]]:
        return [pool.node_manifest(name) for pool in self.pools for name in pool.node_names]

    def pool(self, name: str) -> Pool:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)

    def scaled(self, total_nodes: int) -> Topology:
        """The same pools with ``total_nodes`` nodes in all, shared out in proportion to their sizes (largest
        remainder), each pool keeping at least one node. Named nodes are kept first; the others are named
        ``<pool>-<number>``."""
        if total_nodes < len(self.pools):
            raise TopologyError(f"cannot scale {len(self.pools)} pools to {total_nodes} nodes: one per pool at least")
        weights = [len(pool.node_names) or 1 for pool in self.pools]
        total_weight = sum(weights)
        shares = [total_nodes * weight / total_weight for weight in weights]
        counts = [max(1, math.floor(share)) for share in shares]
        by_remainder = sorted(range(len(shares)), key=lambda index: shares[index] - math.floor(shares[index]))
        while sum(counts) < total_nodes:
            counts[by_remainder.pop() if by_remainder else counts.index(min(counts))] += 1
        while sum(counts) > total_nodes:
            counts[counts.index(max(counts))] -= 1
        pools = []
        for pool, count in zip(self.pools, counts, strict=True):
            names = list(pool.node_names[:count])
            prefix = pool.name_prefix or f"{pool.name}-"
            width = max(4, len(str(count)))
            number = 1
            taken = set(names)
            while len(names) < count:
                candidate = f"{prefix}{number:0{width}d}"
                number += 1
                if candidate not in taken:
                    names.append(candidate)
            pools.append(replace(pool, node_names=tuple(names)))
        return Topology(pools=tuple(pools), source=f"{self.source} scaled to {total_nodes} nodes", storage=self.storage)


def _quantities(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{where}: expected a mapping of resource name to quantity")
    return {str(name): str(value) for name, value in raw.items()}


def _labels(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{where}: labels must be a mapping")
    return {str(key): str(value) for key, value in raw.items()}


def _taints(raw: Any, where: str) -> tuple[Taint, ...]:
    taints = []
    for index, item in enumerate(raw or []):
        if not isinstance(item, Mapping) or "key" not in item or "effect" not in item:
            raise TopologyError(f"{where}.taints[{index}]: needs key and effect")
        if item["effect"] not in VALID_EFFECTS:
            raise TopologyError(f"{where}.taints[{index}]: effect must be one of {sorted(VALID_EFFECTS)}")
        taints.append(Taint(key=str(item["key"]), value=str(item.get("value", "")), effect=str(item["effect"])))
    return tuple(taints)


def parse(document: Mapping[str, Any], source: str = "<memory>") -> Topology:
    if not isinstance(document, Mapping) or not isinstance(document.get("pools"), list):
        raise TopologyError(f"{source}: expected a mapping with a list of pools")
    defaults = document.get("defaults") or {}
    default_capacity = _quantities(defaults.get("capacity"), f"{source}: defaults.capacity")
    default_allocatable = _quantities(defaults.get("allocatable"), f"{source}: defaults.allocatable")
    default_labels = _labels(defaults.get("labels"), f"{source}: defaults.labels")
    pools: list[Pool] = []
    seen_nodes: set[str] = set()
    for index, raw in enumerate(document["pools"]):
        where = f"{source}: pools[{index}]"
        if not isinstance(raw, Mapping) or not raw.get("name"):
            raise TopologyError(f"{where}: every pool needs a name")
        name = str(raw["name"])
        where = f"{source}: pool {name}"
        prefix = str(raw.get("namePrefix") or f"{name}-")
        if raw.get("nodes") is not None:
            node_names = tuple(str(node) for node in raw["nodes"])
        elif raw.get("count") is not None:
            count = int(raw["count"])
            node_names = tuple(f"{prefix}{number:0{max(2, len(str(count)))}d}" for number in range(1, count + 1))
        else:
            raise TopologyError(f"{where}: give either nodes (a list of names) or count")
        duplicates = seen_nodes.intersection(node_names)
        if duplicates or len(set(node_names)) != len(node_names):
            raise TopologyError(f"{where}: node names must be unique, repeated: {sorted(duplicates) or node_names}")
        seen_nodes.update(node_names)
        capacity = {**default_capacity, **_quantities(raw.get("capacity"), f"{where}.capacity")}
        if raw.get("capacity") is not None and raw.get("allocatable") is None:
            allocatable = dict(capacity)
        else:
            allocatable = {**(default_allocatable or capacity), **_quantities(raw.get("allocatable"), where)}
        if GPU_RESOURCE not in capacity or GPU_RESOURCE not in allocatable:
            raise TopologyError(f"{where}: capacity and allocatable need {GPU_RESOURCE}")
        if not raw.get("gpuModel"):
            raise TopologyError(f"{where}: gpuModel is required (the nvidia.com/gpu.product label)")
        pools.append(
            Pool(
                name=name,
                node_names=node_names,
                gpu_model=str(raw["gpuModel"]),
                labels={**default_labels, **_labels(raw.get("labels"), where)},
                taints=_taints(raw.get("taints"), where),
                capacity=capacity,
                allocatable=allocatable,
                name_prefix=prefix,
            )
        )
    if not pools:
        raise TopologyError(f"{source}: no pools")
    return Topology(pools=tuple(pools), source=source, storage=_storage(document.get("storage"), source))


BINDING_MODES = {"Immediate", "WaitForFirstConsumer"}


def _storage(raw: Any, source: str) -> Storage | None:
    if raw is None:
        return None
    where = f"{source}: storage"
    if not isinstance(raw, Mapping) or not raw.get("className"):
        raise TopologyError(f"{where}: needs a className")
    mode = str(raw.get("volumeBindingMode", "Immediate"))
    if mode not in BINDING_MODES:
        raise TopologyError(f"{where}: volumeBindingMode must be one of {sorted(BINDING_MODES)}")
    volumes = []
    for index, item in enumerate(raw.get("volumes") or []):
        if not isinstance(item, Mapping) or not item.get("name") or not item.get("capacity"):
            raise TopologyError(f"{where}.volumes[{index}]: needs a name and a capacity")
        modes = tuple(str(mode) for mode in item.get("accessModes") or Volume.access_modes)
        labels = tuple(sorted(_labels(item.get("labels"), f"{where}.volumes[{index}]").items()))
        volumes.append(
            Volume(name=str(item["name"]), capacity=str(item["capacity"]), access_modes=modes, labels=labels)
        )
    names = [volume.name for volume in volumes]
    if len(set(names)) != len(names):
        raise TopologyError(f"{where}: volume names must be unique")
    extra = {key: str(raw[key]) for key in ("nodeLabel", "pathPrefix") if raw.get(key)}
    return Storage(
        class_name=str(raw["className"]),
        volumes=tuple(volumes),
        binding_mode=mode,
        **{"node_label" if key == "nodeLabel" else "path_prefix": value for key, value in extra.items()},
    )


def load(path: Path | str | None = None, *, scale_nodes: int | None = None) -> Topology:
    """Read a topology file (the demo topology by default), optionally scaled to ``scale_nodes`` nodes."""
    file = Path(path) if path else DEFAULT_TOPOLOGY
    try:
        document = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise TopologyError(f"cannot read topology {file}: {error}") from error
    topology = parse(document, source=file.name)
    return topology.scaled(scale_nodes) if scale_nodes else topology
