"""Spill-after (seed 000's mixed mode): a job placed strictly that is still unschedulable after N minutes is moved
to soft placement. Kubernetes lets a suspended Job's scheduling directives change, so the move is: suspend the
Job, wait until its pods are gone, replace affinity and tolerations (and the seed-000 annotations), resume."""

import logging
import time
from datetime import timedelta

from django.db import transaction
from django.db.models import DurationField, ExpressionWrapper, F
from django.utils import timezone

from cluster import resources
from cluster.errors import ClusterError
from cluster.manifests import ebcloud_annotations, scheduling_directives

from .choices import JobState, Placement
from .manifests import manifest_spec
from .models import Job, JobEvent

log = logging.getLogger(__name__)


def due_jobs():
    now = timezone.now()
    waited = ExpressionWrapper(now - F("cluster_created_at"), output_field=DurationField())
    candidates = (
        Job.objects.filter(
            placement=Placement.SPILL_AFTER,
            spilled=False,
            state__in=[JobState.SUBMITTED, JobState.PENDING],
            cluster_created_at__isnull=False,
            pods__scheduled=False,
        )
        .annotate(waited=waited)
        .select_related("team", "pool")
        .distinct()
    )
    return [job for job in candidates if job.waited >= timedelta(minutes=job.spill_after_minutes)]


def _wait_until_quiet(namespace: str, name: str, *, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = resources.read_job(namespace, name)
        if job is None:
            return
        status = job.status
        if not (status.active or 0) and status.start_time is None:
            return
        time.sleep(0.5)
    raise ClusterError(f"Job {namespace}/{name} did not stop its pods within {timeout:.0f}s of being suspended")


def spill(job: Job) -> None:
    namespace, name = job.team.namespace, job.job_name
    soft = manifest_spec(job, soft=True)
    directives = scheduling_directives(soft)
    resources.patch_job(namespace, name, {"spec": {"suspend": True}})
    _wait_until_quiet(namespace, name)
    patch = [
        {"op": "add", "path": "/spec/template/spec/affinity", "value": directives["affinity"]},
        {"op": "add", "path": "/spec/template/spec/tolerations", "value": directives["tolerations"]},
    ]
    if soft.ebcloud_annotations:
        for key, value in ebcloud_annotations(soft).items():
            patch.append(
                {"op": "add", "path": f"/spec/template/metadata/annotations/{key.replace('/', '~1')}", "value": value}
            )
    resources.patch_job(namespace, name, patch)
    resources.patch_job(namespace, name, {"spec": {"suspend": False}})
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        locked.spilled = True
        locked.save(update_fields=["spilled"])
        JobEvent.objects.create(
            job=locked,
            message=f"still unschedulable after {job.spill_after_minutes} min: moved to soft placement "
            f"(may run in {', '.join(p.slug for p in soft.spill_pools)})",
        )


def spill_due_jobs() -> list[int]:
    moved = []
    for job in due_jobs():
        try:
            spill(job)
            moved.append(job.pk)
        except ClusterError as error:
            log.warning("could not move job %s to soft placement: %s", job.pk, error)
            JobEvent.objects.create(job=job, message=f"moving to soft placement failed, will retry: {error}")
    return moved
