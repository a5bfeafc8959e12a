"""Kubernetes objects reduced to the few typed facts the portal records.

The watches hand over raw JSON dicts (deserialising tens of thousands of pods into client models costs more than
listing them); everything the portal needs from a node, a pod or a Job is read here, once, by pure functions, into
frozen dataclasses. The apps record these facts through their own services and never look into raw objects.

Times come from the cluster (conditions, container states), never from when the sync happened to look.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.utils.dateparse import parse_datetime

from .manifests import GPU_RESOURCE, LABEL_JOB_ID


def _time(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


def _condition(obj: dict, kind: str) -> dict | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def _job_id_label(metadata: dict) -> int | None:
    label = (metadata.get("labels") or {}).get(LABEL_JOB_ID)
    return int(label) if label and label.isdigit() else None


# --- nodes --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str]
    taints: tuple[dict, ...]  # {"key", "value" ("" when absent), "effect"}
    gpu_capacity: int
    gpu_allocatable: int  # never above capacity
    ready: bool
    unschedulable: bool


def _gpu_count(section: dict | None) -> int:
    try:
        return int((section or {}).get(GPU_RESOURCE) or 0)
    except (TypeError, ValueError):
        return 0


def node_facts(node: dict) -> NodeFacts:
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = _condition(node, "Ready")
    capacity = _gpu_count(status.get("capacity"))
    return NodeFacts(
        name=metadata["name"],
        labels=metadata.get("labels") or {},
        taints=tuple(
            {"key": t.get("key"), "value": t.get("value") or "", "effect": t.get("effect")}
            for t in spec.get("taints") or []
        ),
        gpu_capacity=capacity,
        gpu_allocatable=min(_gpu_count(status.get("allocatable")), capacity),
        ready=ready is not None and ready.get("status") == "True",
        unschedulable=bool(spec.get("unschedulable")),
    )


# --- pods ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodFacts:
    uid: str
    namespace: str
    name: str
    job_id: int | None  # the portal job the pod's label claims; whether the claim holds is the portal's to judge
    owner_job: str  # name of the Job that controls the pod ("" when none)
    node_name: str
    gpus: int
    phase: str
    scheduled: bool
    pending_reason: str  # the scheduler's message while it cannot place the pod
    created_at: datetime | None
    bound_at: datetime | None  # when it was bound to its node
    finished_at: datetime | None  # when its last container finished (None while it runs)


def _container_gpus(container: dict) -> int:
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get(GPU_RESOURCE) or (resources.get("limits") or {}).get(GPU_RESOURCE)
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def pod_gpus(pod: dict) -> int:
    """GPUs a pod holds: the sum over its containers (init containers run before them and are not added)."""
    return sum(_container_gpus(container) for container in (pod.get("spec") or {}).get("containers") or [])


def finished_at(pod: dict) -> datetime | None:
    """When a terminated pod's last container finished (None while it runs)."""
    status = pod.get("status") or {}
    if status.get("phase") not in ("Succeeded", "Failed"):
        return None
    times = [
        _time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for s in status.get("containerStatuses") or []
    ]
    times = [t for t in times if t]
    if times:
        return max(times)
    ready = _condition(pod, "Ready")
    return _time(ready.get("lastTransitionTime")) if ready else None


def _controlling_job(metadata: dict) -> str:
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("controller") and owner.get("kind") == "Job":
            return owner.get("name") or ""
    return ""


def pod_facts(pod: dict) -> PodFacts:
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    scheduled_condition = _condition(pod, "PodScheduled")
    node_name = (pod.get("spec") or {}).get("nodeName") or ""
    scheduled = bool(node_name) and (scheduled_condition is None or scheduled_condition.get("status") == "True")
    bound_at = None
    if scheduled:
        bound_at = _time((scheduled_condition or {}).get("lastTransitionTime")) or _time(status.get("startTime"))
        bound_at = bound_at or _time(metadata.get("creationTimestamp"))
    reason = ""
    if not scheduled and scheduled_condition is not None and scheduled_condition.get("status") == "False":
        reason = scheduled_condition.get("message") or scheduled_condition.get("reason") or ""
    return PodFacts(
        uid=metadata["uid"],
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        job_id=_job_id_label(metadata),
        owner_job=_controlling_job(metadata),
        node_name=node_name,
        gpus=pod_gpus(pod),
        phase=status.get("phase") or "Pending",
        scheduled=scheduled,
        pending_reason=reason,
        created_at=_time(metadata.get("creationTimestamp")),
        bound_at=bound_at,
        finished_at=finished_at(pod),
    )


# --- Jobs ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobFacts:
    namespace: str
    name: str
    job_id: int | None  # the portal job the Job's label claims
    outcome: str  # "Complete", "Failed", or "" while it has not finished
    finished_at: datetime | None  # when the final condition became true
    reason: str  # the Failed condition's reason (e.g. "DeadlineExceeded", "BackoffLimitExceeded")
    message: str  # the Failed condition's message


def job_facts(job: dict) -> JobFacts:
    metadata = job.get("metadata") or {}
    outcome, at, reason, message = "", None, "", ""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True" or condition.get("type") not in ("Complete", "Failed"):
            continue
        outcome = condition["type"]
        at = _time(condition.get("lastTransitionTime"))
        if outcome == "Failed":
            reason = condition.get("reason") or "Failed"
            message = condition.get("message") or ""
        break
    return JobFacts(
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        job_id=_job_id_label(metadata),
        outcome=outcome,
        finished_at=at,
        reason=reason,
        message=message,
    )
