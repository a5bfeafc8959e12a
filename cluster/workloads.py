"""Kueue's Workload objects reduced to the facts the portal keeps: which job, which ClusterQueue, admitted or not
and on which flavors, Kueue's latest reason while it waits, and the last eviction (preempted, pods not ready in
time, ...). Pure functions over the raw JSON dicts the watch hands over; no Django.

Kueue names the Workload of Job `rsv-42` `job-rsv-42-<hash>` and makes the Job its owner, so the owner reference
(kind Job, name `rsv-<id>`) says which portal job it belongs to; the sync checks the namespace too.
"""

import re
from dataclasses import dataclass
from datetime import datetime

from django.utils.dateparse import parse_datetime

WORKLOAD_PLURAL = "workloads"
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


def _time(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


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
