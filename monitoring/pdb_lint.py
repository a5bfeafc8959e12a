"""PodDisruptionBudget lint (seed 003): a PDB whose minAvailable is at or above what the workload's
HorizontalPodAutoscaler may scale down to (minReplicas) leaves the Cluster Autoscaler no pod it may evict when
the workload sits at its minimum, so the node never drains and never scales down. maxUnavailable: 0 blocks every
eviction. The fix the seed gives: minAvailable < minReplicas, or maxUnavailable: 1.

Pure: plain Kubernetes objects (dicts) in, findings out. Only workloads whose pods land on pool nodes count
(node selector or required node affinity naming a pool's labels and contradicting none, or a toleration of a pool's
taint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")


@dataclass(frozen=True)
class Finding:
    namespace: str
    pdb: str
    workload: str
    pool: str
    problem: str

    def line(self) -> str:
        return f"{self.namespace}/{self.pdb} ({self.workload}, pool {self.pool}): {self.problem}"


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """Kubernetes label selector semantics (matchLabels AND matchExpressions); an empty selector matches all."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _resolve(value, replicas: int, *, round_up: bool) -> int:
    """An IntOrString of a PDB against a replica count (percentages round up, as the disruption controller
    does for minAvailable and maxUnavailable)."""
    if isinstance(value, str) and value.endswith("%"):
        fraction = float(value[:-1]) / 100 * replicas
        return math.ceil(fraction) if round_up else math.floor(fraction)
    return int(value)


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' rule: the effect matches (or the toleration names none); an empty key with `Exists` tolerates
    every taint, else the keys are equal and `Exists` takes any value while `Equal` (the default) wants the same."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return operator == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def workload_pools(template_spec: dict, pools: list[dict]) -> list[str]:
    """Slugs of the pools whose nodes this pod template targets: its node selector, or a term of its required node
    affinity, names at least one of the pool's labels and contradicts none (keys the pool does not set, such as
    `kubernetes.io/arch`, are left aside), or it tolerates one of the pool's taints."""
    selector = template_spec.get("nodeSelector") or {}
    terms = (
        ((template_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    tolerations = template_spec.get("tolerations") or []
    found = []
    for pool in pools:
        labels = pool["node_selector"]
        named = {key: value for key, value in selector.items() if key in labels}
        by_selector = bool(named) and all(labels[key] == value for key, value in named.items())
        by_affinity = False
        for term in terms:
            expressions = [e for e in term.get("matchExpressions") or [] if e.get("key") in labels]
            if expressions and selector_matches({"matchExpressions": expressions}, labels):
                by_affinity = True
        by_toleration = any(
            tolerates(toleration, taint) for taint in pool.get("taints") or [] for toleration in tolerations
        )
        if by_selector or by_affinity or by_toleration:
            found.append(pool["slug"])
    return found


def lint(*, pdbs: list[dict], hpas: list[dict], workloads: list[dict], pools: list[dict]) -> list[Finding]:
    """Findings for every PDB that covers a workload on pool nodes and blocks its scale-down."""
    findings = []
    for pdb in pdbs:
        namespace = pdb["metadata"].get("namespace", "default")
        spec = pdb.get("spec") or {}
        for workload in workloads:
            if (
                workload.get("kind") not in WORKLOAD_KINDS
                or workload["metadata"].get("namespace", "default") != namespace
            ):
                continue
            template = (workload.get("spec") or {}).get("template") or {}
            if not selector_matches(spec.get("selector"), (template.get("metadata") or {}).get("labels") or {}):
                continue
            on_pools = workload_pools(template.get("spec") or {}, pools)
            if not on_pools:
                continue
            name = f"{workload['kind']}/{workload['metadata']['name']}"
            hpa = _hpa_for(workload, hpas)
            if hpa is not None:
                floor = int((hpa.get("spec") or {}).get("minReplicas") or 1)
                floor_text = f"the HPA {hpa['metadata']['name']}'s minReplicas {floor}"
            else:
                floor = int((workload.get("spec") or {}).get("replicas") or 1)
                floor_text = f"its {floor} replicas"
            problem = None
            if "minAvailable" in spec:
                minimum = _resolve(spec["minAvailable"], floor, round_up=True)
                if minimum >= floor:
                    problem = (
                        f"minAvailable {spec['minAvailable']} ({minimum} pods) is at or above {floor_text}: at that "
                        "size no pod may be evicted, so the Cluster Autoscaler cannot drain the node. Use "
                        f"minAvailable below {floor}, or maxUnavailable: 1."
                    )
            elif "maxUnavailable" in spec and _resolve(spec["maxUnavailable"], floor, round_up=True) < 1:
                problem = "maxUnavailable 0 forbids every eviction: the Cluster Autoscaler can never drain the node."
            if problem:
                findings.append(Finding(namespace, pdb["metadata"]["name"], name, ", ".join(on_pools), problem))
    return findings


def _hpa_for(workload: dict, hpas: list[dict]) -> dict | None:
    for hpa in hpas:
        target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if (
            hpa["metadata"].get("namespace", "default") == workload["metadata"].get("namespace", "default")
            and target.get("kind") == workload.get("kind")
            and target.get("name") == workload["metadata"]["name"]
        ):
            return hpa
    return None
