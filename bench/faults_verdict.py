"""What the fault benchmark (bench/faults.py) finds after each burst: the cluster as the apiserver shows it, watched
by the benchmark itself (`ClusterRecorder`), against the portal's rows — lost, phantom and duplicated jobs, cancelled
jobs still running, when it all settled, and each job's usage intervals against its pods' own records."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from bench.faults_load import TEAM, Burst


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


@dataclass
class PodRecord:
    uid: str
    job_id: int
    gpus: int
    scheduled_at: datetime | None = None
    finished_at: datetime | None = None
    phase: str = ""
    deleting: bool = False
    gone: bool = False


class ClusterRecorder:
    """Every pod and Job of the team namespace, from the apiserver's own list and watch (reconnecting through an
    apiserver restart), so that the portal's records can be compared with the cluster's."""

    def __init__(self, namespace: str):
        self.namespace = namespace
        self.pods: dict[str, PodRecord] = {}
        self.job_uids: dict[int, set[str]] = {}
        self.jobs: dict[int, dict] = {}  # job id -> the latest Job object (None once deleted)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=("pods",), daemon=True),
            threading.Thread(target=self._run, args=("jobs",), daemon=True),
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _record_pod(self, kind: str, pod: dict) -> None:
        metadata = pod.get("metadata") or {}
        label = (metadata.get("labels") or {}).get("reservoir.io/job-id", "")
        if not label.isdigit():
            return
        status = pod.get("status") or {}
        containers = (pod.get("spec") or {}).get("containers") or []
        gpus = sum(int(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", 0)) for c in containers)
        record = self.pods.setdefault(metadata["uid"], PodRecord(metadata["uid"], int(label), gpus))
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
                record.scheduled_at = _time(condition.get("lastTransitionTime"))
        finished = [
            _time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for s in status.get("containerStatuses") or []
        ]
        finished = [f for f in finished if f]
        if finished:
            record.finished_at = max(finished)
        record.phase = status.get("phase") or record.phase
        record.deleting = bool(metadata.get("deletionTimestamp"))
        record.gone = kind == "DELETED"

    def _record_job(self, kind: str, job: dict) -> None:
        metadata = job.get("metadata") or {}
        label = (metadata.get("labels") or {}).get("reservoir.io/job-id", "")
        if not label.isdigit():
            return
        self.job_uids.setdefault(int(label), set()).add(metadata["uid"])
        self.jobs[int(label)] = None if kind == "DELETED" else job

    def _run(self, what: str) -> None:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        from cluster import client

        client.reset()
        record = self._record_pod if what == "pods" else self._record_job
        version = None
        while not self.stop.is_set():
            try:
                api = client.core() if what == "pods" else client.batch()
                lister = api.list_namespaced_pod if what == "pods" else api.list_namespaced_job
                if version is None:
                    listed = json.loads(lister(self.namespace, _preload_content=False, _request_timeout=10).data)
                    with self.lock:
                        for item in listed["items"]:
                            record("ADDED", item)
                    version = listed["metadata"]["resourceVersion"]
                response = lister(
                    self.namespace,
                    watch=True,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                    _preload_content=False,
                    _request_timeout=(5, 90),
                )
                for line in iter_resp_lines(response):
                    if self.stop.is_set():
                        break
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        version = None if event["object"].get("code") == 410 else version
                        break
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        with self.lock:
                            record(event["type"], event["object"])
            except ApiException as error:
                if error.status == 410:
                    version = None
                time.sleep(0.5)
            except Exception:  # noqa: BLE001 - the apiserver restarts: resume from the last version
                client.reset()
                time.sleep(0.5)


def portal_rows(names: list[str]) -> list[dict]:
    from django.db import connection

    from jobs.models import Job

    try:
        return list(
            Job.objects.filter(team__slug=TEAM, name__in=names).values(
                "pk", "name", "state", "cluster_created_at", "last_error"
            )
        )
    finally:
        connection.close()


def outbox_pending() -> int:
    from django.db import connection

    from portal.models import OutboxMessage

    try:
        return OutboxMessage.objects.filter(sent_at__isnull=True).count()
    finally:
        connection.close()


def settled(burst: Burst, recorder: ClusterRecorder) -> tuple[bool, dict]:
    """Whether the cluster matches the database for this burst's jobs (the convergence condition)."""
    accepted = [o for o in burst.outcomes if o.kind == "submit" and o.job_id]
    rows = {row["pk"]: row for row in portal_rows([o.name for o in burst.outcomes if o.kind == "submit"])}
    missing, leftover = [], []
    with recorder.lock:
        jobs = dict(recorder.jobs)
    for outcome in accepted:
        row = rows.get(outcome.job_id)
        job = jobs.get(outcome.job_id)
        exists = job is not None and not (job.get("metadata") or {}).get("deletionTimestamp")
        if row is None or (row["state"] != "cancelled" and not exists and row["state"] != "failed"):
            missing.append(outcome.job_id)
        if row is not None and row["state"] == "cancelled" and exists:
            leftover.append(outcome.job_id)
    pending = outbox_pending()
    return not missing and not leftover and pending == 0, {
        "missing": missing,
        "leftover": leftover,
        "outbox_pending": pending,
    }


def final_everywhere(burst: Burst, recorder: ClusterRecorder) -> bool:
    """Every job of the burst is final in the portal and every one of its pods has stopped in the cluster."""
    names = [o.name for o in burst.outcomes if o.kind == "submit"]
    rows = portal_rows(names)
    if any(row["state"] not in ("succeeded", "failed", "cancelled") for row in rows):
        return False
    ids = {row["pk"] for row in rows}
    with recorder.lock:
        pods = [p for p in recorder.pods.values() if p.job_id in ids]
    return all(p.gone or p.phase in ("Succeeded", "Failed") for p in pods)


def usage_comparison(burst: Burst, recorder: ClusterRecorder) -> dict:
    from django.db import connection

    from billing.models import UsageInterval

    ids = {row["pk"] for row in portal_rows([o.name for o in burst.outcomes if o.kind == "submit"])}
    with recorder.lock:
        cluster = {
            (p.uid, p.gpus, p.scheduled_at, p.finished_at)
            for p in recorder.pods.values()
            if p.job_id in ids and p.scheduled_at is not None and p.gpus > 0
        }
    try:
        portal = set(
            UsageInterval.objects.filter(job_id__in=ids).values_list("pod_uid", "gpus", "started_at", "ended_at")
        )
    finally:
        connection.close()

    def gpu_seconds(rows) -> float:
        return sum(gpus * ((end - start).total_seconds() if end and start else 0) for _, gpus, start, end in rows)

    differ = sorted(cluster ^ portal, key=str)
    return {
        "exact": not differ,
        "intervals_portal": len(portal),
        "intervals_cluster": len(cluster),
        "gpu_seconds_portal": round(gpu_seconds(portal), 3),
        "gpu_seconds_cluster": round(gpu_seconds(cluster), 3),
        "differences": [[str(v) for v in row] for row in differ[:6]],
    }


def resent_by_convergence(job_ids: list[int]) -> int:
    """Jobs whose submission message was sent more than once (the first time at commit, then by convergence)."""
    from django.db import connection
    from django.db.models import Count

    from portal.models import OutboxMessage

    try:
        sends = (
            OutboxMessage.objects.filter(task="jobs.submit_job")
            .values("args")
            .annotate(n=Count("pk"))
            .filter(n__gt=1)
            .values_list("args", flat=True)
        )
        return sum(1 for args in sends if args and args[0] in set(job_ids))
    finally:
        connection.close()


def verdict(burst: Burst, recorder: ClusterRecorder) -> dict:
    submits = [o for o in burst.outcomes if o.kind == "submit"]
    cancels = [o for o in burst.outcomes if o.kind == "cancel"]
    rows = portal_rows([o.name for o in submits])
    by_name: dict[str, list[dict]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    accepted = [o for o in submits if o.job_id]
    errors = [o for o in submits if not o.job_id]
    with recorder.lock:
        job_uids = {k: set(v) for k, v in recorder.job_uids.items()}
        pods_per_job: dict[int, set[str]] = {}
        for pod in recorder.pods.values():
            pods_per_job.setdefault(pod.job_id, set()).add(pod.uid)
        running = {
            p.job_id
            for p in recorder.pods.values()
            if not p.gone and not p.deleting and p.phase in ("Pending", "Running")
        }
        jobs = dict(recorder.jobs)
    state = {row["pk"]: row["state"] for row in rows}
    lost = [
        o.job_id
        for o in accepted
        if o.job_id not in state or (state[o.job_id] != "cancelled" and o.job_id not in job_uids)
    ]
    phantom_submits = [o.name for o in errors if o.name in by_name]
    phantom_cancels = [o.job_id for o in cancels if not 200 <= o.status < 300 and state.get(o.job_id) == "cancelled"]
    duplicated = [name for name, found in by_name.items() if len(found) > 1]
    duplicated += [f"job {k}: {len(v)} Jobs" for k, v in job_uids.items() if k in state and len(v) > 1]
    duplicated += [f"job {k}: {len(v)} pods" for k, v in pods_per_job.items() if k in state and len(v) > 1]
    cancelled_running = [
        job_id
        for job_id, job_state in state.items()
        if job_state == "cancelled"
        and (job_id in running or (jobs.get(job_id) and not jobs[job_id]["metadata"].get("deletionTimestamp")))
    ]
    statuses: dict[str, int] = {}
    for o in submits + cancels:
        statuses[f"{o.kind} {o.status or 'no answer'}"] = statuses.get(f"{o.kind} {o.status or 'no answer'}", 0) + 1
    return {
        "submitted": len(submits),
        "accepted": len(accepted),
        "answers": dict(sorted(statuses.items())),
        "rejected_5xx": sum(1 for o in submits + cancels if o.status >= 500),
        "rejected_5xx_without_retry_after": sum(1 for o in submits + cancels if o.status >= 500 and not o.retry_after),
        "resent_by_convergence": resent_by_convergence(list(state)),
        "connection_errors": sum(1 for o in submits + cancels if o.status == 0),
        "other_errors": sorted({o.status for o in submits + cancels if 300 <= o.status < 500}),
        "cancels": len(cancels),
        "cancels_accepted": sum(1 for o in cancels if 200 <= o.status < 300),
        "failed_by_portal": sum(1 for row in rows if row["state"] == "failed"),
        "lost": len(lost),
        "phantom": len(phantom_submits) + len(phantom_cancels),
        "duplicated": len(duplicated),
        "cancelled_but_running": len(cancelled_running),
        "details": {
            "lost": lost,
            "phantom": phantom_submits + [f"cancel {j}" for j in phantom_cancels],
            "duplicated": duplicated,
            "cancelled_but_running": cancelled_running,
        },
    }
