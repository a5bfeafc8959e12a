"""Kubernetes objects reduced to the few typed facts the portal records.

The watches hand over raw JSON dicts (deserialising tens of thousands of pods into client models costs more than
listing them); everything the portal needs from a node, a pod or a Job is read here, once, by pure functions, into
frozen dataclasses. The apps record these facts through their own services and never look into raw objects.

Times come from the cluster (conditions, container states), never from when the sync happened to look.

Kueue's Workloads: Kueue names the Workload of Job `rsv-42` `job-rsv-42-<hash>` and makes the Job its owner, so
the owner reference (kind Job, name `rsv-<id>`) says which portal job it belongs to (the sync checks the namespace
too). The facts say which ClusterQueue admitted it on which flavors, Kueue's latest reason while it waits, and the
last eviction (preempted and for whom, pods not ready in time, ...).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.utils.dateparse import parse_datetime

from .kueue import BUDGET_CHECK_NAME
from .labels import GPU_RESOURCE, LABEL_JOB_ID, USAGE_FINALIZER


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
    deleting: bool = False  # it has a deletionTimestamp
    held_for_usage: bool = False  # it carries the portal's USAGE_FINALIZER
    completion_index: int | None = None  # its index in an Indexed Job (a multi-node job's node rank)
    restarts: int = 0  # container restarts, summed over its containers

    @property
    def usage_final(self) -> bool:
        """True when the pod's GPU time can no longer change: it has terminated (its finish time is final), or it
        is being deleted without ever having been bound to a node (it never held a GPU)."""
        return self.phase in ("Succeeded", "Failed") or (self.deleting and not self.scheduled)

    @property
    def releasable(self) -> bool:
        """True when the portal's finalizer may come off once these facts are recorded: the pod is being deleted and
        its GPU time is final (`usage_final`). A pod that has ended but is not being deleted keeps it: the finalizer
        matters only to a deletion, and taking it off at the end was one more pod write at the busiest moment, when
        the control plane is starting the jobs that follow (issue 30). Its Job's deletion (a cancel, the TTL, a
        preemption) deletes it, and then the sync records it once more and releases it."""
        return self.held_for_usage and self.deleting and self.usage_final


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


def completion_index(metadata: dict) -> int | None:
    """An Indexed Job's pod's index (annotation batch.kubernetes.io/job-completion-index), else None."""
    value = (metadata.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def restart_count(status: dict) -> int:
    return sum(int(each.get("restartCount") or 0) for each in status.get("containerStatuses") or [])


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
        deleting=bool(metadata.get("deletionTimestamp")),
        held_for_usage=USAGE_FINALIZER in (metadata.get("finalizers") or ()),
        completion_index=completion_index(metadata),
        restarts=restart_count(status),
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
    deleting: bool = False  # a deletion has begun (deletionTimestamp set)


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
        deleting=bool(metadata.get("deletionTimestamp")),
    )


# --- Kueue's Workloads --------------------------------------------------------------------------------------------

PORTAL_JOB_NAME = re.compile(r"^rsv-(\d+)$")
PREEMPTOR_UID = re.compile(r"\(UID: ([0-9a-fA-F-]+)")


@dataclass(frozen=True)
class WorkloadFacts:
    uid: str
    namespace: str
    name: str
    job_name: str  # the owning batch/v1 Job's name ("" when it has none)
    cluster_queue: str
    priority: int
    quota_reserved: bool
    admitted: bool
    finished: bool
    flavors: tuple[str, ...]  # flavors assigned to the GPUs of its pod sets, in pod-set order, without repeats
    message: str  # why it waits (QuotaReserved=False / Admitted=False message)
    evicted: bool
    evicted_reason: str
    evicted_message: str
    requeue_count: int
    created_at: datetime | None
    admitted_at: datetime | None

    @property
    def portal_job_id(self) -> int | None:
        """The portal job id the owning Job's name encodes (`rsv-<id>`), or None."""
        match = PORTAL_JOB_NAME.match(self.job_name)
        return int(match.group(1)) if match else None

    @property
    def preemptor_uid(self) -> str:
        """The UID of the Workload this one was preempted for ("" when it was not preempted)."""
        if self.evicted_reason != "Preempted":
            return ""
        match = PREEMPTOR_UID.search(self.evicted_message)
        return match.group(1) if match else ""


def _conditions(workload: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type")}


def _true(conditions: dict[str, dict], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def workload_facts(workload: dict) -> WorkloadFacts:
    metadata = workload.get("metadata") or {}
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    conditions = _conditions(workload)
    owner = next((ref.get("name", "") for ref in metadata.get("ownerReferences") or [] if ref.get("kind") == "Job"), "")
    admission = status.get("admission") or {}
    flavors: list[str] = []
    for assignment in admission.get("podSetAssignments") or []:
        for flavor in (assignment.get("flavors") or {}).values():
            if flavor and flavor not in flavors:
                flavors.append(flavor)
    quota_reserved = _true(conditions, "QuotaReserved")
    admitted = _true(conditions, "Admitted")
    message = ""
    if not admitted:
        waiting = conditions.get("QuotaReserved") if not quota_reserved else conditions.get("Admitted")
        message = (waiting or {}).get("message") or ""
        # Held by the portal's budget check: its own words say why, not Kueue's "admission check is false".
        held = next(
            (
                check.get("message") or ""
                for check in status.get("admissionChecks") or []
                if check.get("name") == BUDGET_CHECK_NAME and check.get("state") in ("Pending", "Retry")
            ),
            "",
        )
        if held.startswith("budget for "):
            message = held
    # The Evicted condition keeps the reason and message of the last eviction after the workload is requeued
    # (status False): the portal reads them when it sees an admitted job go back to the queue.
    evicted = conditions.get("Evicted") or {}
    preempted = conditions.get("Preempted") or {}
    evicted_reason = evicted.get("reason") or ""
    evicted_message = evicted.get("message") or ""
    if preempted.get("status") == "True" or (evicted_reason == "Preempted" and preempted.get("message")):
        evicted_reason = "Preempted"
        evicted_message = preempted.get("message") or evicted_message
    admitted_condition = conditions.get("Admitted") or {}
    return WorkloadFacts(
        uid=metadata.get("uid", ""),
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        job_name=owner,
        cluster_queue=admission.get("clusterQueue") or "",
        priority=int(spec.get("priority") or 0),
        quota_reserved=quota_reserved,
        admitted=admitted,
        finished=_true(conditions, "Finished"),
        flavors=tuple(flavors),
        message=message,
        evicted=evicted.get("status") == "True",
        evicted_reason=evicted_reason,
        evicted_message=evicted_message,
        requeue_count=int((status.get("requeueState") or {}).get("count") or 0),
        created_at=_time(metadata.get("creationTimestamp")),
        admitted_at=_time(admitted_condition.get("lastTransitionTime")) if admitted else None,
    )
