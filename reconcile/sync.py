"""Keep the portal's view of the cluster current: nodes, GPU pods, the portal's Jobs and their Kueue Workloads.

Idea: this module only routes. Each watched object is parsed into facts (`cluster.facts`), attributed (which
team by namespace, which pool by node, which portal job — if any), and handed to the app whose rows it implies:
nodes to `pools.services`, pods and job states to `jobs.observations` and `jobs.settling`, GPU time to
`billing.usage`. Each of those writes is an upsert keyed by the object's name or UID, so seeing the same object
twice — after a relist, a restart of this process, or a replayed watch — writes the same row again instead of a
second one: nothing is counted twice. A relist also settles what disappeared while nobody watched: admitted jobs
whose Job is gone fail with that reason.

GPU time ends at the pod's own finish time, also when nobody watched it end. The pods of portal Jobs carry the portal's
finalizer (`cluster.manifests.USAGE_FINALIZER`), so a pod that finishes and is deleted while the sync is away (an
apiserver restart, a sync restart, a cancel, a preemption, a TTL) stays in the apiserver, terminated, with its finish
time: the next event or list records it, and only after that is committed does the sync take the finalizer off
(`ClusterSync._release`). It does so only for a pod being deleted: a pod that has ended and stays (its Job keeps it
until the Job goes) keeps the finalizer, which costs nothing, and is released when it is deleted. This holds per pod, so
it holds for jobs of several pods alike. Pods without the finalizer (other owners' GPU pods, which the portal meters but
does not shape) can still vanish unseen: the relist closes their intervals at the time of the relist, the earliest
moment the portal can know.

A label proves nothing: anyone who may create a pod or a Job in some namespace can write `reservoir.io/job-id`.
An object belongs to portal job N only if it is the Job `rsv-N` in N's own team namespace, or a pod that Job
controls in that namespace (`Attribution.portal_job`). Anything else carrying the label is a foreign object: it
is still metered (team by namespace, pool by node) but never linked to job N and never changes N's state.

The watches parse each object as it arrives (`ListWatch.parse`), so the handlers here take facts, never raw
objects, and a full list never holds every raw object at once. Adding a watched resource: a parser in
`cluster/facts.py`, a recording service in the app that owns the rows, a `relist_<name>` / `<name>_event` pair
here that routes one to the other, and one row in `reconcile/management/commands/sync_cluster.py`'s `build_watches`.
"""

import logging
import time
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing import usage as billing
from cluster import resources
from cluster.facts import JobFacts, NodeFacts, PodFacts, WorkloadFacts, pod_facts
from jobs import observations, settling
from jobs.models import Job, SyncState, job_name_for
from pools import services as pools
from pools.models import Node
from portal.models import Team

log = logging.getLogger(__name__)

# A Job created in the cluster this recently before a list started may be missing from it (the apiserver's snapshot
# and the portal's record of the creation are not one instant).
JUST_CREATED = timedelta(seconds=30)


class Attribution:
    """Who a cluster object is attributed to. Caches namespace -> team and node -> pool; a miss reloads the
    mapping, at most once every `REFRESH_SECONDS`, so that thousands of pods in a namespace that is no team's
    cost no query each. A hit is checked once per batch (`team_ids`): a team deleted meanwhile leaves its
    namespace behind, and a team made again with its slug is another row."""

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
        prefix = settings.TEAM_NAMESPACE_PREFIX
        self.teams = {f"{prefix}{slug}": pk for pk, slug in Team.objects.values_list("pk", "slug")}
        self._teams_loaded = time.monotonic()

    def _load_nodes(self) -> None:
        self.node_pools = dict(Node.objects.values_list("name", "pool_id"))
        self._nodes_loaded = time.monotonic()

    def team_id(self, namespace: str) -> int | None:
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

    def team_ids(self, namespaces: set[str]) -> dict[str, int | None]:
        """Namespace -> team id for one batch's namespaces, each id checked in one query to still be a team's. When
        one is gone the mapping is reloaded: a team made again with the slug is found under its own id, and the
        namespace of a team that is only gone is no team's. A batch never names a vanished team, which the rows it
        writes would refuse at commit, and so the watch would read it again, fail again, and record nothing more."""
        found = {namespace: self.team_id(namespace) for namespace in namespaces}
        cached = {team_id for team_id in found.values() if team_id is not None}
        if not cached or Team.objects.filter(pk__in=cached).count() == len(cached):
            return found
        self._load_teams()
        return {namespace: self.team_id(namespace) for namespace in namespaces}

    def pool_id(self, node_name: str) -> int | None:
        if node_name and node_name not in self.node_pools and time.monotonic() - self._nodes_loaded > 1.0:
            self._load_nodes()
        return self.node_pools.get(node_name)

    @staticmethod
    def jobs(job_ids: set[int]) -> dict[int, tuple[int, int]]:
        """Portal job id -> (team id, pool id) of the jobs among `job_ids` that exist."""
        if not job_ids:
            return {}
        return {
            pk: (team_id, pool_id)
            for pk, team_id, pool_id in Job.objects.filter(pk__in=job_ids).values_list("pk", "team_id", "pool_id")
        }

    def portal_job(
        self, *, claimed: int | None, job_name: str, namespace: str, jobs: dict[int, tuple[int, int]]
    ) -> int | None:
        """The portal job an object belongs to, or None for a foreign one. `claimed` is the id its label names;
        `job_name` is the object's own name for a Job, the name of the Job that controls it for a pod. The claim
        holds only for the Job `rsv-<id>` (and its pods) in the namespace of job <id>'s own team."""
        if claimed is None or claimed not in jobs or job_name != job_name_for(claimed):
            return None
        team_id, _pool_id = jobs[claimed]
        return claimed if self.team_id(namespace) == team_id else None


class ClusterSync:
    """Routes what the watches see to the services that record it. Thread-safe per resource (one watch thread
    each)."""

    def __init__(self):
        self.attribution = Attribution()
        self._nodes_recorded: dict[str, tuple[NodeFacts, float]] = {}  # name -> (facts last recorded, when)
        self._releaser: ThreadPoolExecutor | None = None  # made at the first release (`_release`)
        self._list_started: dict[str, datetime] = {}  # resource -> when its running list asked for its first page

    def list_starting(self, resource: str) -> None:
        """A list of `resource` is about to start (`ListWatch.on_list_start`): its snapshot is no older than now."""
        self._list_started[resource] = timezone.now()

    # --- versions -------------------------------------------------------------------------------------------
    @staticmethod
    def load_version(resource: str) -> str | None:
        return SyncState.objects.filter(resource=resource).values_list("resource_version", flat=True).first() or None

    @staticmethod
    def save_version(resource: str, version: str, *, listed: bool = False) -> None:
        """One UPDATE when the row exists (every save but the first): update_or_create's locking read inside a
        transaction cost four round trips, a sixth of the sync's time under load (bench/admission.py)."""
        now = timezone.now()
        fields = {"resource_version": version, "updated_at": now}
        if listed:
            fields["listed_at"] = now
        if not SyncState.objects.filter(resource=resource).update(**fields):
            SyncState.objects.update_or_create(resource=resource, defaults=fields)

    # --- nodes -> pools -------------------------------------------------------------------------------------
    # A node's status is rewritten by its heartbeats, which change nothing the portal keeps: such an update is
    # recorded again only when the row's `last_seen_at` is this old (at 2,000 nodes, recording every heartbeat was
    # a fifth of the sync's time).
    NODE_SEEN_REFRESH_SECONDS = 300.0

    def relist_nodes(self, nodes: list[NodeFacts], version: str) -> None:
        with transaction.atomic():
            node_pools = pools.record_nodes(nodes=nodes, complete=True)
            self.save_version("nodes", version, listed=True)
        self.attribution.node_pools = node_pools
        now = time.monotonic()
        self._nodes_recorded = {node.name: (node, now) for node in nodes}

    def node_event(self, kind: str, node: NodeFacts) -> None:
        recorded = self._nodes_recorded
        if kind == "DELETED":
            pools.remove_node(name=node.name)
            self.attribution.node_pools.pop(node.name, None)
            recorded.pop(node.name, None)
            return
        now = time.monotonic()
        previous = recorded.get(node.name)
        if previous is not None and previous[0] == node and now - previous[1] < self.NODE_SEEN_REFRESH_SECONDS:
            return
        self.attribution.node_pools.update(pools.record_nodes(nodes=[node]))
        recorded[node.name] = (node, now)

    # --- pods -> jobs (pods, job states) and billing (usage intervals) --------------------------------------
    @staticmethod
    def parse_pod(pod: dict) -> PodFacts | None:
        """The pod's facts when the portal records it — it holds GPUs, or claims to be a portal job's — else None."""
        facts = pod_facts(pod)
        return facts if facts.gpus > 0 or facts.job_id is not None else None

    def _owners(self, pods: list[PodFacts]) -> list[observations.PodOwner]:
        team_ids = self.attribution.team_ids({f.namespace for f in pods})
        portal_jobs = self.attribution.jobs({f.job_id for f in pods if f.job_id is not None})
        owners = []
        for pod in pods:
            job_id = self.attribution.portal_job(
                claimed=pod.job_id, job_name=pod.owner_job, namespace=pod.namespace, jobs=portal_jobs
            )
            pool_id = self.attribution.pool_id(pod.node_name) if pod.node_name else None
            if pool_id is None and job_id is not None:
                pool_id = portal_jobs[job_id][1]  # not placed yet: the pool it was submitted to
            owners.append(observations.PodOwner(team_id=team_ids[pod.namespace], pool_id=pool_id, job_id=job_id))
        return owners

    def _interval(self, pod: PodFacts, owner: observations.PodOwner, **kwargs):
        """The pod's GPU time: metered in the pool of the node it is bound to (none: not metered)."""
        node_pool = self.attribution.pool_id(pod.node_name) if pod.scheduled else None
        return billing.usage_interval(pod, team_id=owner.team_id, pool_id=node_pool, job_id=owner.job_id, **kwargs)

    def relist_pods(self, pods: list[PodFacts], version: str) -> None:
        now = timezone.now()
        owners = self._owners(pods)
        intervals = [i for i in (self._interval(f, o) for f, o in zip(pods, owners, strict=True)) if i]
        with transaction.atomic():
            observations.record_pods(pods=list(zip(pods, owners, strict=True)), complete=True)
            billing.record_usage(intervals=intervals)
            billing.close_usage_of_vanished_pods(present_pod_uids={f.uid for f in pods}, at=now)
            self.save_version("pods", version, listed=True)
        observations.record_pod_states(pods=[(o.job_id, f) for f, o in zip(pods, owners, strict=True) if o.job_id])
        self._release(pods)

    def pod_event(self, kind: str, pod: PodFacts) -> None:
        self.pod_events([(kind, pod)])

    def pod_events(self, events: list[tuple[str, PodFacts]]) -> None:
        """Events of pods, in the order the watch gave them, recorded together: one transaction, one upsert of pod
        rows and one of usage intervals for the whole batch (after a long list, the events that piled up meanwhile
        are thousands; one transaction each took seconds to work off). Only each pod's latest facts matter — every
        row written is a function of them — so a pod seen several times is recorded once, as last seen. A pod
        deleted in the batch is recorded as it was when it went (its GPU time closes at its own finish), its
        job settled from that, and only then is its row removed."""
        latest: dict[str, tuple[str, PodFacts]] = {}
        for kind, pod in events:
            latest[pod.uid] = (kind, pod)
        pods = [pod for _kind, pod in latest.values()]
        owners = self._owners(pods)
        now = timezone.now()
        intervals = []
        deleted = []
        for (kind, pod), owner in zip(latest.values(), owners, strict=True):
            ended_at = (pod.finished_at or now) if kind == "DELETED" else None
            interval = self._interval(pod, owner, ended_at=ended_at) if ended_at else self._interval(pod, owner)
            if interval:
                intervals.append(interval)
            if kind == "DELETED":
                deleted.append(pod.uid)
        with transaction.atomic():
            observations.record_pods(pods=list(zip(pods, owners, strict=True)))
            billing.record_usage(intervals=intervals)
            # The jobs settled in the same transaction: one commit for the batch, not one more for each job in it.
            observations.record_pod_states(
                pods=[(owner.job_id, pod) for pod, owner in zip(pods, owners, strict=True) if owner.job_id]
            )
        if deleted:
            observations.remove_pods(uids=deleted)
        self._release([pod for kind, pod in latest.values() if kind != "DELETED"])

    # Releases made at once. One after the other, 500 pods released together held the pod watch for 13 s at 1,000 nodes
    # (one PATCH each), and the Running of the pods whose events waited behind them was written that much later
    # (issue 30). The threads live as long as the sync: each keeps its ApiClient and its connection.
    RELEASE_THREADS = 4

    def _release(self, pods: list[PodFacts]) -> None:
        """Take the usage finalizer off the pods being deleted whose GPU time is final and now committed
        (`PodFacts.releasable`): only then may they leave the cluster. Every release is tried; a failure then raises, so
        the watch applies the same event (or list) again and this is retried; a pod released twice is no harm."""
        releasable = [pod for pod in pods if pod.releasable]
        if len(releasable) <= 1:
            for pod in releasable:
                resources.release_pod(pod.namespace, pod.name)
            return
        if self._releaser is None:
            self._releaser = ThreadPoolExecutor(max_workers=self.RELEASE_THREADS, thread_name_prefix="release")
        calls = [self._releaser.submit(resources.release_pod, pod.namespace, pod.name) for pod in releasable]
        wait(calls)
        for call in calls:
            call.result()  # the first failure, raised

    # --- the portal's Jobs -> jobs (job states) -------------------------------------------------------------
    def _portal_jobs(self, job_objs: list[JobFacts]) -> list[tuple[int, JobFacts]]:
        portal_jobs = self.attribution.jobs({f.job_id for f in job_objs if f.job_id is not None})
        if portal_jobs:  # their namespaces' teams, checked: a job of a team made again is the new team's own
            self.attribution.team_ids({f.namespace for f in job_objs})
        accepted = []
        for facts in job_objs:
            job_id = self.attribution.portal_job(
                claimed=facts.job_id, job_name=facts.name, namespace=facts.namespace, jobs=portal_jobs
            )
            if job_id is not None:
                accepted.append((job_id, facts))
            elif facts.job_id is not None:
                log.warning(
                    "Job %s/%s claims portal job %s but is not its Job: ignored",
                    facts.namespace,
                    facts.name,
                    facts.job_id,
                )
        return accepted

    def job_event(self, kind: str, job: JobFacts) -> None:
        if kind != "DELETED" and observations.job_outcome_observation(job) is None:
            # A Job that has not finished implies nothing (its Workload and pods say where the job is): no query for
            # the half dozen status updates each Job gets while it is created, unsuspended and running.
            return
        for job_id, facts in self._portal_jobs([job]):
            if kind == "DELETED":
                observations.fail_job_deleted_outside(job_id=job_id)
            else:
                observations.record_job_state(job_id=job_id, job=facts)

    def relist_jobs(self, job_list: list[JobFacts], version: str) -> None:
        accepted = self._portal_jobs(job_list)
        for job_id, facts in accepted:
            observations.record_job_state(job_id=job_id, job=facts)
        # Admitted jobs created in the cluster before this list whose Job is gone were deleted outside the portal. A
        # list of many pages can take minutes to fetch and record: the jobs whose Job was made after it started are in
        # none of its pages, so the cutoff counts from its start, never from now.
        listed_from = self._list_started.pop("jobs", None) or timezone.now()
        observations.settle_missing_jobs(
            present_job_ids={job_id for job_id, _facts in accepted}, created_before=listed_from - JUST_CREATED
        )
        self.save_version("jobs", version, listed=True)

    # --- Kueue's Workloads -> jobs (workload rows, job states) ---------------------------------------------------
    def _portal_workloads(self, workloads: list[WorkloadFacts]) -> list[tuple[int, WorkloadFacts]]:
        """The Workloads of portal jobs: owned by the Job `rsv-<id>` in job <id>'s own team namespace."""
        portal_jobs = self.attribution.jobs({f.portal_job_id for f in workloads if f.portal_job_id is not None})
        if portal_jobs:
            self.attribution.team_ids({f.namespace for f in workloads})
        accepted = []
        for facts in workloads:
            job_id = self.attribution.portal_job(
                claimed=facts.portal_job_id, job_name=facts.job_name, namespace=facts.namespace, jobs=portal_jobs
            )
            if job_id is not None:
                accepted.append((job_id, facts))
        return accepted

    def relist_workloads(self, workloads: list[WorkloadFacts], version: str) -> None:
        settling.record_workloads(workloads=self._portal_workloads(workloads))
        self.save_version("workloads", version, listed=True)

    def workload_event(self, kind: str, facts: WorkloadFacts) -> None:
        self.workload_events([(kind, facts)])

    def workload_events(self, events: list[tuple[str, WorkloadFacts]]) -> None:
        """Events of Workloads, applied in the order the watch gave them — each step of a job's timeline (admitted,
        evicted, admitted again) is its own event — in one transaction, with the portal jobs they belong to looked
        up once and settled together (`settling.record_workload_events`). A failure rolls the whole batch back; the
        watch reads it again."""
        owners = {
            facts.uid: job_id
            for job_id, facts in self._portal_workloads([facts for kind, facts in events if kind != "DELETED"])
        }
        with transaction.atomic():
            settling.record_workload_events(events=events, owners=owners)
