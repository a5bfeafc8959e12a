"""Collect the DCGM series from Prometheus at one aligned step and roll them up per GPU, pool, team and job.

The idea: a step is a point in time aligned to `MONITORING_STEP_SECONDS` (12:00:00, 12:01:00, ...). For a step,
one instant query per DCGM field gives every GPU's value; the exporter's labels say where it is (`Hostname`,
`gpu`) and who holds it (`namespace`, `pod`). The node row gives the pool, the pod row (kept by the cluster
sync) gives the team and the job. Everything written for a step is keyed by the step, so collecting the same
step twice writes the same rows (samples are replaced, a job's running summary counts a step once).
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs.models import Job, Pod
from pools.models import Node
from portal.models import Team

from .choices import Scope
from .models import GpuReading, JobUtilisation, TelemetryRun, UtilisationSample
from .prometheus import PrometheusError, instant_query

log = logging.getLogger(__name__)

# DCGM field → GpuReading attribute. GR_ENGINE_ACTIVE is a profiling field that not every GPU exposes.
FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util_percent",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "memory_copy_util_percent",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_watts",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",
}
JOB_POD_NAME = re.compile(r"^rsv-(\d+)-")


def aligned_step(moment: datetime, step_seconds: int | None = None) -> datetime:
    step = step_seconds or settings.MONITORING_STEP_SECONDS
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % step, tz=UTC)


@dataclass
class GpuRow:
    node_name: str
    gpu: int
    uuid: str = ""
    model_name: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    values: dict[str, float] = field(default_factory=dict)
    pool_id: int | None = None
    team_id: int | None = None
    job_id: int | None = None

    @property
    def busy(self) -> bool:
        return bool(self.pod_name)

    @property
    def memory_used_percent(self) -> float | None:
        used, free = self.values.get("fb_used_mib"), self.values.get("fb_free_mib")
        if used is None or free is None or used + free <= 0:
            return None
        return 100.0 * used / (used + free)


def read_gpus(at: datetime) -> dict[tuple[str, int], GpuRow]:
    """Every GPU Prometheus knows at `at`, with its fields (raises PrometheusError)."""
    gpus: dict[tuple[str, int], GpuRow] = {}
    for metric, attribute in FIELDS.items():
        for sample in instant_query(metric, at=at):
            labels = sample.labels
            node, index = labels.get("Hostname") or "", labels.get("gpu") or ""
            if not node or not index.isdigit():
                continue
            row = gpus.setdefault((node, int(index)), GpuRow(node, int(index)))
            row.uuid = row.uuid or labels.get("UUID", "")
            row.model_name = row.model_name or labels.get("modelName", "")
            if labels.get("pod") and not row.pod_name:
                row.pod_namespace, row.pod_name = labels.get("namespace", ""), labels["pod"]
            if attribute not in row.values or labels.get("pod"):  # the series of the pod that holds it wins
                row.values[attribute] = sample.value
    return gpus


def attribute(gpus: dict[tuple[str, int], GpuRow]) -> None:
    """Fill in pool (from the node), team and job (from the pod row, else from the namespace and pod name)."""
    pools = dict(Node.objects.filter(name__in={node for node, _ in gpus}).values_list("name", "pool_id"))
    pod_keys = {(row.pod_namespace, row.pod_name) for row in gpus.values() if row.busy}
    pods = {}
    if pod_keys:
        namespaces = {namespace for namespace, _ in pod_keys}
        for namespace, name, team_id, job_id in Pod.objects.filter(
            namespace__in=namespaces, name__in={name for _, name in pod_keys}
        ).values_list("namespace", "name", "team_id", "job_id"):
            pods[(namespace, name)] = (team_id, job_id)
    prefix = settings.TEAM_NAMESPACE_PREFIX
    # A pod row's team may not be known yet (sync attributes it a moment later): the namespace says it too.
    teams = dict(
        Team.objects.filter(
            slug__in={namespace.removeprefix(prefix) for namespace, _ in pod_keys if namespace.startswith(prefix)}
        ).values_list("slug", "id")
    )
    guessed_jobs = {}
    for namespace, name in pod_keys - pods.keys():
        match = JOB_POD_NAME.match(name)
        if match and namespace.startswith(prefix):
            guessed_jobs[(namespace, name)] = int(match.group(1))
    valid_jobs = dict(Job.objects.filter(pk__in=set(guessed_jobs.values())).values_list("pk", "team_id"))
    for row in gpus.values():
        row.pool_id = pools.get(row.node_name)
        if not row.busy:
            continue
        key = (row.pod_namespace, row.pod_name)
        namespace_team = teams.get(row.pod_namespace.removeprefix(prefix))
        if key in pods:
            team_id, row.job_id = pods[key]
            row.team_id = team_id or namespace_team
            continue
        row.team_id = namespace_team
        job_id = guessed_jobs.get(key)
        if job_id is not None and valid_jobs.get(job_id) == row.team_id:
            row.job_id = job_id


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rollup(rows: list[GpuRow]) -> dict:
    utils = [row.values["util_percent"] for row in rows if "util_percent" in row.values]
    memory = [value for row in rows if (value := row.memory_used_percent) is not None]
    temperatures = [row.values["temperature_c"] for row in rows if "temperature_c" in row.values]
    power = [row.values["power_watts"] for row in rows if "power_watts" in row.values]
    return {
        "gpus": len(rows),
        "gpus_busy": sum(1 for row in rows if row.busy),
        # no GPU said how busy it is (a MIG GPU, a missing series): no utilisation, not 0 %
        "util_avg": _mean(utils),
        "util_max": max(utils, default=None),
        "memory_used_percent_avg": _mean(memory),
        "memory_used_percent_max": max(memory, default=None),
        "temperature_max": max(temperatures, default=None),
        "power_watts": sum(power) if power else None,
    }


@transaction.atomic
def store(at: datetime, gpus: dict[tuple[str, int], GpuRow], *, collected_at: datetime, duration_ms: int) -> None:
    """Write the step: GPU readings (upsert), pool/team/job samples (replace), job summaries (once per step)."""
    readings = [
        GpuReading(
            node_name=row.node_name,
            gpu=row.gpu,
            uuid=row.uuid,
            model_name=row.model_name,
            pool_id=row.pool_id,
            team_id=row.team_id,
            job_id=row.job_id,
            pod_namespace=row.pod_namespace,
            pod_name=row.pod_name,
            at=at,
            **{attribute: row.values.get(attribute) for attribute in FIELDS.values()},
        )
        for row in gpus.values()
    ]
    GpuReading.objects.bulk_create(
        readings,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["node_name", "gpu"],
        update_fields=[
            "uuid",
            "model_name",
            "pool",
            "team",
            "job",
            "pod_namespace",
            "pod_name",
            "at",
            *FIELDS.values(),
        ],  # fmt: skip
    )
    GpuReading.objects.filter(at__lt=at).delete()  # GPUs that no longer report (node gone)

    groups: dict[tuple[str, int], list[GpuRow]] = defaultdict(list)
    for row in gpus.values():
        if row.pool_id:
            groups[(Scope.POOL, row.pool_id)].append(row)
        if row.team_id:
            groups[(Scope.TEAM, row.team_id)].append(row)
        if row.job_id:
            groups[(Scope.JOB, row.job_id)].append(row)
    UtilisationSample.objects.filter(at=at).delete()
    samples = []
    for (scope, subject_id), rows in groups.items():
        subject = {"pool_id": None, "team_id": None, "job_id": None, f"{scope}_id": subject_id}
        samples.append(UtilisationSample(scope=scope, at=at, **subject, **rollup(rows)))
    UtilisationSample.objects.bulk_create(samples, batch_size=2000)

    job_samples = {sample.job_id: sample for sample in samples if sample.scope == Scope.JOB}
    _update_job_summaries(at, job_samples)
    TelemetryRun.objects.update_or_create(
        at=at,
        defaults={"collected_at": collected_at, "ok": True, "error": "", "gpus": len(gpus), "duration_ms": duration_ms},
    )


def _update_job_summaries(at: datetime, job_samples: dict[int, UtilisationSample]) -> None:
    if not job_samples:
        return
    idle_below = settings.MONITORING_IDLE_GPU_PERCENT
    existing = {
        summary.job_id: summary
        for summary in JobUtilisation.objects.select_for_update().filter(job_id__in=job_samples.keys())
    }
    for job_id, sample in job_samples.items():
        summary = existing.get(job_id) or JobUtilisation(job_id=job_id)
        if summary.last_at is not None and summary.last_at >= at:
            continue  # this step (or a later one) is already counted
        if sample.util_avg is None:
            continue  # no utilisation reported this step: nothing to count, and no sign of idleness
        summary.samples += 1
        summary.util_sum += sample.util_avg
        summary.last_util = sample.util_avg
        summary.last_memory_used_percent = sample.memory_used_percent_avg
        summary.gpus = sample.gpus
        summary.first_at = summary.first_at or at
        summary.last_at = at
        if sample.util_avg < idle_below:
            summary.idle_since = summary.idle_since or at
        else:
            summary.idle_since = None
        summary.save()


def collect(*, at: datetime | None = None) -> TelemetryRun:
    """Collect one step (the current one by default) and return its run record; a Prometheus failure is recorded
    on the run, not raised, so that the next step simply tries again. An answer without any GPU while the sync
    knows Ready GPU nodes (the exporter or its scrape is gone) is such a failure too: no data is not "no GPU", so
    the last readings and their alerts are kept and the telemetry counts as stale."""
    now = timezone.now()
    at = at or aligned_step(now)
    started = time.monotonic()
    try:
        gpus = read_gpus(at)
    except PrometheusError as error:
        return _not_collected(at, now, str(error))
    if not gpus and Node.objects.filter(ready=True, gpu_allocatable__gt=0).exists():
        return _not_collected(at, now, "no DCGM series for any GPU, though Ready GPU nodes exist")
    attribute(gpus)
    store(at, gpus, collected_at=now, duration_ms=int((time.monotonic() - started) * 1000))
    return TelemetryRun.objects.get(at=at)


def _not_collected(at: datetime, now: datetime, error: str) -> TelemetryRun:
    log.warning("telemetry step %s not collected: %s", at.isoformat(), error)
    run, _ = TelemetryRun.objects.update_or_create(
        at=at, defaults={"collected_at": now, "ok": False, "error": error[:2000], "gpus": 0}
    )
    return run


def latest_ok_run(now: datetime | None = None) -> TelemetryRun | None:
    """The newest collected step if it is recent (within three steps of `now`), else None: telemetry is stale."""
    now = now or timezone.now()
    horizon = now - timedelta(seconds=3 * settings.MONITORING_STEP_SECONDS)
    return TelemetryRun.objects.filter(ok=True, at__gte=horizon).order_by("-at").first()


def prune(*, now: datetime | None = None) -> int:
    """Drop samples older than the retention (job samples sooner than pool and team ones)."""
    now = now or timezone.now()
    deleted, _ = UtilisationSample.objects.filter(
        scope=Scope.JOB, at__lt=now - timedelta(days=settings.MONITORING_JOB_SAMPLE_RETENTION_DAYS)
    ).delete()
    more, _ = UtilisationSample.objects.filter(
        at__lt=now - timedelta(days=settings.MONITORING_SAMPLE_RETENTION_DAYS)
    ).delete()
    runs, _ = TelemetryRun.objects.filter(at__lt=now - timedelta(days=7)).delete()
    return deleted + more + runs
