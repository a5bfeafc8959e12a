"""The floor of the admission benchmark (bench/admission.py): the same jobs created straight in the cluster, without
the portal, on the same cluster, teams and quotas, so that the portal's figures are read as ratios to it (issue 30).

- `render_floor_jobs`: each planned job's Job exactly as the portal renders it (`jobs.manifests.render` of an
  unsaved job row of the same team, pool, user and spec): suspended, labelled with the team's LocalQueue, the same
  pod template (its usage finalizer included). Only the id differs: FLOOR_ID_BASE + the job's index, so that names
  (`rsv-<id>`) and labels never meet the portal phase's jobs, whose ids start at 1;
- `create_all`: each Job created with the Kubernetes client (`cluster.resources.create_job`, the call the submit
  task makes), from as many threads as the portal phase has submitters, round-robin over the teams in the same
  order; a submission's start and end are those of its create call;
- `wait_finished`: until every floor Job has finished (the floor's Jobs listed every 2 s); when nothing finished for
  a minute, the floor Jobs that have no Workload are touched (`nudge_skipped`): Kueue v0.17.0 drops for good a Job
  whose namespace its cache had not seen yet (reconcile/jobs.py, "Jobs Kueue skipped"), and the floor's first Jobs
  come a moment after the namespaces. It never happens in a run that does not stall;
- `drain`: every Job of the team namespaces deleted with its pods and Workloads (the pods' usage finalizer taken
  off: no sync runs to take it), until no pod is left there, no Workload, and no ClusterQueue holds quota — the
  cluster as the other phase found it.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from bench import harness

# Floor job ids (and so Job names rsv-<id>): far above any id the portal phase's fresh database gives.
FLOOR_ID_BASE = 10_000_000


def is_floor(job_id: int) -> bool:
    return job_id >= FLOOR_ID_BASE


def render_floor_jobs(submissions: list, team_users: list, spec_of) -> list[dict]:
    """The manifest of each submission (`spec_of(submission)` its JobSpec), as the portal's submit task renders it."""
    from bench.pipeline import RESERVED_POOL
    from jobs.manifests import render
    from jobs.models import Job
    from pools.models import Pool

    pool = Pool.objects.get(slug=RESERVED_POOL)
    manifests = []
    for submission in submissions:
        team, user = team_users[submission.team_index]
        job = Job(pk=FLOOR_ID_BASE + submission.index, team=team, pool=pool, submitted_by=user)
        for name, value in spec_of(submission).as_model_fields().items():
            setattr(job, name, value)
        manifests.append(render(job))
    return manifests


def create_all(submissions: list, manifests: list[dict], threads: int) -> float:
    """Create every Job, each thread taking every `threads`-th submission (as the portal phase's submitters do);
    returns the seconds it took."""
    from cluster import resources

    def create(submission, manifest: dict) -> None:
        submission.started = time.time()
        try:
            resources.create_job(manifest)
            submission.job_id = FLOOR_ID_BASE + submission.index
        except Exception as error:  # noqa: BLE001 - counted and reported
            submission.error = f"{type(error).__name__}: {error}"[:300]
        submission.finished = time.time()

    def worker(offset: int) -> None:
        for submission, manifest in zip(submissions[offset::threads], manifests[offset::threads], strict=True):
            create(submission, manifest)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as executor:
        list(executor.map(worker, range(threads)))
    return time.monotonic() - started


def floor_job_outcomes() -> dict[int, str]:
    """Floor job id -> "Complete", "Failed" or "" (not finished) of every floor Job in the cluster."""
    from cluster import resources

    return {
        facts.job_id: facts.outcome
        for page in resources.managed_job_pages()
        for facts in page
        if facts.job_id is not None and is_floor(facts.job_id)
    }


def wait_finished(submitted: list, run_started: float, timeout: float, log) -> dict[int, str]:
    """Until every created floor Job has finished, or nothing finished for five minutes, or `timeout` after the
    start; returns the outcomes last seen."""
    deadline = run_started + timeout
    last_change, last_finished, last_log, last_nudge = time.time(), -1, time.time(), time.time()
    outcomes: dict[int, str] = {}
    while time.time() < deadline:
        outcomes = floor_job_outcomes()
        finished = sum(1 for outcome in outcomes.values() if outcome)
        if finished >= len(submitted):
            return outcomes
        if time.time() - last_log >= 10:
            log(f"floor: t={time.time() - run_started:5.0f}s {len(outcomes)} Jobs, {finished} finished")
            last_log = time.time()
        if finished != last_finished:
            last_change, last_finished, last_nudge = time.time(), finished, time.time()
        elif time.time() - last_change > 300:
            log(f"floor: nothing finished for 300 s ({finished} of {len(submitted)}): stopping")
            return outcomes
        elif time.time() - last_nudge > 60:
            nudged = nudge_skipped({job_id for job_id, outcome in outcomes.items() if not outcome})
            log(f"floor: nothing finished for 60 s; {len(nudged)} Job(s) without a Workload touched: {nudged[:10]}")
            last_nudge = time.time()
        time.sleep(2)
    return outcomes


def nudge_skipped(unfinished: set[int]) -> list[str]:
    """Touch each unfinished floor Job that has no Workload (one LIST of the Workloads); their names."""
    from cluster import kueue_objects, resources

    jobs = [(f.namespace, f.name) for page in resources.managed_job_pages() for f in page if f.job_id in unfinished]
    return kueue_objects.nudge_jobs_without_workload(jobs, at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def _holding_quota(cluster_queues: set[str]) -> list[str]:
    """The ClusterQueues of `cluster_queues` that still reserve quota for a Workload."""
    from cluster import client
    from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION

    items = client.custom_objects().list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")["items"]
    return [
        item["metadata"]["name"]
        for item in items
        if item["metadata"]["name"] in cluster_queues
        and (
            (item.get("status") or {}).get("reservingWorkloads") or (item.get("status") or {}).get("admittedWorkloads")
        )
    ]


def drain(namespaces: list[str], cluster_queues: set[str], log, timeout: float = 600) -> float:
    """Delete every Job of `namespaces` with its pods and Workloads; returns once no pod or Workload is left there
    and none of `cluster_queues` reserves quota (the seconds it took)."""
    from cluster import client, resources
    from cluster.kueue import KUEUE_GROUP, KUEUE_VERSION

    started = time.monotonic()
    batch, core, custom = client.batch(), client.core(), client.custom_objects()
    for namespace in namespaces:
        batch.delete_collection_namespaced_job(namespace, propagation_policy="Background")

    def drained() -> bool:
        left = 0
        for namespace in namespaces:
            for pod in core.list_namespaced_pod(namespace).items:
                left += 1
                if pod.metadata.deletion_timestamp and pod.metadata.finalizers:
                    resources.release_pod(namespace, pod.metadata.name)
            workloads = custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads")
            left += len(workloads["items"])
        return left == 0 and not _holding_quota(cluster_queues)

    harness.wait_for(drained, timeout=timeout, what="the floor's pods and Workloads to go", interval=1.0)
    seconds = time.monotonic() - started
    log(f"drained the team namespaces in {seconds:.1f}s: no pod, no Workload, no quota held")
    return seconds
