"""Keep the portal's view of the cluster current: nodes, GPU pods and the portal's Jobs.

Idea: every object is reduced to the row it implies (a Node row, a Pod row, a UsageInterval, a job state), and
writing that row is an upsert keyed by the object's name or UID. Seeing the same object twice — after a relist,
a restart of this process, or a replayed watch — therefore writes the same row again instead of a second one:
nothing is counted twice. A pod's GPU interval runs from when it was bound to a node (its PodScheduled
condition) to when it terminated (its containers' finish time, or when it was deleted), so the times come from
the cluster, not from when sync happened to look.

A relist also settles what disappeared while nobody watched: pods that are gone are closed at the time of the
relist (the earliest moment sync can know), and admitted jobs whose Job is gone fail with that reason.
"""

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from billing.models import UsageInterval
from cluster.manifests import GPU_RESOURCE, LABEL_JOB_ID
from pools.isolation import pool_for
from pools.models import Node, Pool
from portal.models import Team

from . import services
from .choices import ADMITTED_STATES, JobState
from .models import Job, Pod, SyncState

log = logging.getLogger(__name__)
BATCH = 1000


def _time(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


def _gpus(container: dict) -> int:
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get(GPU_RESOURCE) or (resources.get("limits") or {}).get(GPU_RESOURCE)
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def pod_gpus(pod: dict) -> int:
    """GPUs a pod holds: the sum over its containers (init containers run before them and are not added)."""
    spec = pod.get("spec") or {}
    return sum(_gpus(container) for container in spec.get("containers") or [])


def _condition(pod: dict, kind: str) -> dict | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


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


@dataclass
class PodFacts:
    uid: str
    namespace: str
    name: str
    job_id: int | None
    node_name: str
    gpus: int
    phase: str
    scheduled: bool
    pending_reason: str
    created_at: datetime
    bound_at: datetime | None
    finished_at: datetime | None


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
    job_label = (metadata.get("labels") or {}).get(LABEL_JOB_ID)
    return PodFacts(
        uid=metadata["uid"],
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        job_id=int(job_label) if job_label and job_label.isdigit() else None,
        node_name=node_name,
        gpus=pod_gpus(pod),
        phase=status.get("phase") or "Pending",
        scheduled=scheduled,
        pending_reason=reason,
        created_at=_time(metadata.get("creationTimestamp")) or timezone.now(),
        bound_at=bound_at,
        finished_at=finished_at(pod),
    )


def job_observation(facts: PodFacts) -> services.Observation | None:
    """The job state a portal pod implies. Final states come from the Job object, not from its pods."""
    if facts.phase == "Running":
        return services.Observation(
            state=JobState.RUNNING,
            at=facts.bound_at,
            node_name=facts.node_name,
            message=f"running on {facts.node_name}",
        )
    if facts.phase == "Pending":
        if facts.scheduled:
            return services.Observation(
                state=JobState.PENDING,
                at=facts.bound_at,
                node_name=facts.node_name,
                pending_reason=f"starting on {facts.node_name}",
            )
        return services.Observation(
            state=JobState.PENDING,
            pending_reason=facts.pending_reason or "waiting to be scheduled",
            message=facts.pending_reason,
        )
    return None


def job_final_observation(job_obj: dict) -> services.Observation | None:
    for condition in (job_obj.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        at = _time(condition.get("lastTransitionTime"))
        if condition.get("type") == "Complete":
            return services.Observation(state=JobState.SUCCEEDED, at=at, message="completed")
        if condition.get("type") == "Failed":
            reason = condition.get("reason") or "Failed"
            text = condition.get("message") or ""
            if reason == "DeadlineExceeded":
                text = "stopped: it ran longer than its maximum run time"
            return services.Observation(state=JobState.FAILED, at=at, message=f"{reason}: {text}".strip(": "))
    return None


class Attribution:
    """Caches of namespace -> team and node -> pool. A miss reloads the mapping, at most once every
    `REFRESH_SECONDS`, so that thousands of pods in a namespace that is no team's cost no query each."""

    REFRESH_SECONDS = 10.0

    def __init__(self):
        self._teams_loaded = self._nodes_loaded = 0.0
        self.teams: dict[str, int] = {}
        self.node_pools: dict[str, int | None] = {}
        self._misses: dict[str, float] = {}
        self.refresh()

    def refresh(self) -> None:
        self._load_teams()
        self._load_nodes()

    def _load_teams(self) -> None:
        from django.conf import settings

        prefix = settings.TEAM_NAMESPACE_PREFIX
        self.teams = {f"{prefix}{slug}": pk for pk, slug in Team.objects.values_list("pk", "slug")}
        self._teams_loaded = time.monotonic()

    def _load_nodes(self) -> None:
        self.node_pools = dict(Node.objects.values_list("name", "pool_id"))
        self._nodes_loaded = time.monotonic()

    def team_id(self, namespace: str) -> int | None:
        from django.conf import settings

        if namespace in self.teams:
            return self.teams[namespace]
        prefix = settings.TEAM_NAMESPACE_PREFIX
        now = time.monotonic()
        if namespace.startswith(prefix) and now - self._misses.get(namespace, -1e9) > 1.0:
            # Possibly a brand-new team: ask for it directly instead of waiting for the next full reload.
            team_id = Team.objects.filter(slug=namespace.removeprefix(prefix)).values_list("pk", flat=True).first()
            if team_id is not None:
                self.teams[namespace] = team_id
                return team_id
            self._misses[namespace] = now
        elif now - self._teams_loaded > self.REFRESH_SECONDS:
            self._load_teams()
        return self.teams.get(namespace)

    def pool_id(self, node_name: str) -> int | None:
        if node_name and node_name not in self.node_pools and time.monotonic() - self._nodes_loaded > 1.0:
            self._load_nodes()
        return self.node_pools.get(node_name)


class ClusterSync:
    """Applies what the watches see to the database. Thread-safe per resource (one watch thread each)."""

    def __init__(self):
        self.attribution = Attribution()

    # --- versions -------------------------------------------------------------------------------------------
    @staticmethod
    def load_version(resource: str) -> str | None:
        return SyncState.objects.filter(resource=resource).values_list("resource_version", flat=True).first() or None

    @staticmethod
    def save_version(resource: str, version: str, *, listed: bool = False) -> None:
        defaults = {"resource_version": version}
        if listed:
            defaults["listed_at"] = timezone.now()
        SyncState.objects.update_or_create(resource=resource, defaults=defaults)

    # --- nodes ----------------------------------------------------------------------------------------------
    def _node_row(self, node: dict, pools: list[Pool]) -> Node:
        metadata = node.get("metadata") or {}
        status = node.get("status") or {}
        labels = metadata.get("labels") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        pool = pool_for(labels, pools)

        def count(section: str) -> int:
            try:
                return int((status.get(section) or {}).get(GPU_RESOURCE) or 0)
            except ValueError:
                return 0

        capacity = count("capacity")
        return Node(
            name=metadata["name"],
            pool=pool,
            labels=labels,
            taints=[
                {"key": t.get("key"), "value": t.get("value", ""), "effect": t.get("effect")}
                for t in (node.get("spec") or {}).get("taints") or []
            ],
            gpu_capacity=capacity,
            gpu_allocatable=min(count("allocatable"), capacity),
            ready=ready,
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            last_seen_at=timezone.now(),
        )

    def _upsert_nodes(self, rows: list[Node]) -> None:
        Node.objects.bulk_create(
            rows,
            batch_size=BATCH,
            update_conflicts=True,
            unique_fields=["name"],
            update_fields=[
                "pool",
                "labels",
                "taints",
                "gpu_capacity",
                "gpu_allocatable",
                "ready",
                "unschedulable",
                "last_seen_at",
            ],
        )

    def relist_nodes(self, nodes: list[dict], version: str) -> None:
        pools = list(Pool.objects.order_by("slug"))
        rows = [self._node_row(node, pools) for node in nodes]
        with transaction.atomic():
            self._upsert_nodes(rows)
            Node.objects.exclude(name__in=[row.name for row in rows]).delete()
            self.save_version("nodes", version, listed=True)
        self.attribution.node_pools = {row.name: row.pool_id for row in rows}

    def node_event(self, kind: str, node: dict) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            Node.objects.filter(name=name).delete()
            self.attribution.node_pools.pop(name, None)
            return
        row = self._node_row(node, list(Pool.objects.order_by("slug")))
        self._upsert_nodes([row])
        self.attribution.node_pools[name] = row.pool_id

    # --- pods -----------------------------------------------------------------------------------------------
    @staticmethod
    def interesting(facts: PodFacts) -> bool:
        return facts.gpus > 0 or facts.job_id is not None

    def _pod_row(self, facts: PodFacts, job_pools: dict[int, int]) -> Pod:
        pool_id = self.attribution.pool_id(facts.node_name) if facts.node_name else None
        if pool_id is None and facts.job_id is not None:
            pool_id = job_pools.get(facts.job_id)
        return Pod(
            uid=facts.uid,
            namespace=facts.namespace,
            name=facts.name,
            team_id=self.attribution.team_id(facts.namespace),
            pool_id=pool_id,
            job_id=facts.job_id if facts.job_id in job_pools else None,
            node_name=facts.node_name,
            gpus=facts.gpus,
            phase=facts.phase,
            scheduled=facts.scheduled,
            pending_reason=facts.pending_reason,
            created_at=facts.created_at,
            bound_at=facts.bound_at,
            finished_at=facts.finished_at,
        )

    def _interval_row(self, facts: PodFacts, row: Pod, *, ended_at: datetime | None = None) -> UsageInterval | None:
        if facts.gpus <= 0 or not facts.scheduled or facts.bound_at is None:
            return None
        pool_id = self.attribution.pool_id(facts.node_name)
        if pool_id is None:
            return None  # a node outside every pool is not metered
        end = ended_at or facts.finished_at
        if end is not None and end < facts.bound_at:
            end = facts.bound_at
        return UsageInterval(
            pod_uid=facts.uid,
            namespace=facts.namespace,
            pod_name=facts.name,
            team_id=row.team_id,
            pool_id=pool_id,
            node_name=facts.node_name,
            job_id=row.job_id,
            gpus=facts.gpus,
            started_at=facts.bound_at,
            ended_at=end,
        )

    POD_FIELDS = (
        "team_id",
        "pool_id",
        "job_id",
        "node_name",
        "gpus",
        "phase",
        "scheduled",
        "pending_reason",
        "bound_at",
        "finished_at",
    )
    INTERVAL_FIELDS = ("team_id", "pool_id", "node_name", "job_id", "gpus", "started_at", "ended_at")

    @classmethod
    def _existing_pods(cls, uids: list[str] | None) -> dict[str, tuple]:
        """uid -> compared values of stored Pod rows (all rows when `uids` is None)."""
        rows = Pod.objects.all() if uids is None else Pod.objects.filter(uid__in=uids)
        return {row[0]: tuple(row[1:]) for row in rows.values_list("uid", *cls.POD_FIELDS)}

    @classmethod
    def _upsert_pods(cls, rows: list[Pod], existing: dict[str, tuple] | None = None) -> None:
        """Write the rows that are new or changed (a relist mostly finds nothing changed: no write at all)."""
        if existing is None:
            existing = cls._existing_pods([row.uid for row in rows])
        changed = [row for row in rows if existing.get(row.uid) != tuple(getattr(row, f) for f in cls.POD_FIELDS)]
        if not changed:
            return
        Pod.objects.bulk_create(
            changed,
            batch_size=BATCH,
            update_conflicts=True,
            unique_fields=["uid"],
            update_fields=[f.removesuffix("_id") for f in cls.POD_FIELDS] + ["seen_at"],
        )

    @classmethod
    def _upsert_intervals(cls, rows: list[UsageInterval]) -> None:
        """Write new or changed intervals. An interval that was closed stays closed at its first end: a replayed
        event cannot reopen or move it."""
        if not rows:
            return
        stored = {
            row[0]: tuple(row[1:])
            for row in UsageInterval.objects.filter(pod_uid__in=[r.pod_uid for r in rows]).values_list(
                "pod_uid", *cls.INTERVAL_FIELDS
            )
        }
        end_index = cls.INTERVAL_FIELDS.index("ended_at")
        changed = []
        for row in rows:
            before = stored.get(row.pod_uid)
            if before is not None and before[end_index] is not None:
                continue
            if before != tuple(getattr(row, f) for f in cls.INTERVAL_FIELDS):
                changed.append(row)
        if not changed:
            return
        UsageInterval.objects.bulk_create(
            changed,
            batch_size=BATCH,
            update_conflicts=True,
            unique_fields=["pod_uid"],
            update_fields=[f.removesuffix("_id") for f in cls.INTERVAL_FIELDS],
        )

    def _job_pools(self, job_ids: set[int]) -> dict[int, int]:
        return dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "pool_id")) if job_ids else {}

    def _observe_jobs(self, facts_list: list[PodFacts]) -> None:
        portal = [f for f in facts_list if f.job_id is not None]
        if not portal:
            return
        current = dict(Job.objects.filter(pk__in={f.job_id for f in portal}).values_list("pk", "state"))
        for facts in portal:
            state = current.get(facts.job_id)
            if state is None or state not in ADMITTED_STATES:
                continue
            observation = job_observation(facts)
            if observation is not None:
                services.observe(job_id=facts.job_id, observation=observation)

    def relist_pods(self, pods: list[dict], version: str) -> None:
        now = timezone.now()
        facts_list = [f for f in (pod_facts(p) for p in pods) if self.interesting(f)]
        job_pools = self._job_pools({f.job_id for f in facts_list if f.job_id is not None})
        rows = [self._pod_row(f, job_pools) for f in facts_list]
        intervals = [i for i in (self._interval_row(f, r) for f, r in zip(facts_list, rows, strict=True)) if i]
        seen = {f.uid for f in facts_list}
        with transaction.atomic():
            existing = self._existing_pods(None)
            self._upsert_pods(rows, existing)
            self._upsert_intervals(intervals)
            gone = [uid for uid in existing if uid not in seen]
            if gone:
                Pod.objects.filter(uid__in=gone).delete()
            # Pods that vanished while nobody watched: closed at the earliest moment we can know it.
            UsageInterval.objects.filter(ended_at__isnull=True).exclude(pod_uid__in=seen).update(ended_at=now)
            self.save_version("pods", version, listed=True)
        self._observe_jobs(facts_list)

    def pod_event(self, kind: str, pod: dict) -> None:
        facts = pod_facts(pod)
        if not self.interesting(facts):
            return
        job_pools = self._job_pools({facts.job_id} if facts.job_id else set())
        row = self._pod_row(facts, job_pools)
        with transaction.atomic():
            if kind == "DELETED":
                ended = facts.finished_at or timezone.now()
                interval = self._interval_row(facts, row, ended_at=ended)
                if interval:
                    self._upsert_intervals([interval])
                Pod.objects.filter(uid=facts.uid).delete()
            else:
                self._upsert_pods([row])
                interval = self._interval_row(facts, row)
                if interval:
                    self._upsert_intervals([interval])
        if kind != "DELETED":
            self._observe_jobs([facts])

    # --- jobs -----------------------------------------------------------------------------------------------
    @staticmethod
    def _portal_job_id(job_obj: dict) -> int | None:
        label = ((job_obj.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_ID)
        return int(label) if label and label.isdigit() else None

    def job_event(self, kind: str, job_obj: dict) -> None:
        job_id = self._portal_job_id(job_obj)
        if job_id is None:
            return
        if kind == "DELETED":
            services.fail_job_deleted_outside(job_id=job_id)
            return
        observation = job_final_observation(job_obj)
        if observation is not None:
            services.observe(job_id=job_id, observation=observation)

    def relist_jobs(self, job_objs: list[dict], version: str) -> None:
        present = set()
        for job_obj in job_objs:
            job_id = self._portal_job_id(job_obj)
            if job_id is None:
                continue
            present.add(job_id)
            observation = job_final_observation(job_obj)
            if observation is not None:
                services.observe(job_id=job_id, observation=observation)
        # Admitted jobs created in the cluster before this list whose Job is gone were deleted outside the portal.
        cutoff = timezone.now() - timedelta(seconds=30)
        missing = (
            Job.objects.filter(state__in=ADMITTED_STATES, cluster_created_at__lt=cutoff)
            .exclude(pk__in=present)
            .values_list("pk", flat=True)
        )
        for job_id in missing:
            services.fail_job_deleted_outside(job_id=job_id)
        self.save_version("jobs", version, listed=True)
