"""Spill-after (seed 000's mixed mode): a job placed strictly that Kueue has not admitted after N minutes is moved
to soft placement. A Job waiting for Kueue is suspended, and Kubernetes lets a suspended Job's scheduling directives
change: the portal replaces its affinity and tolerations (and the seed-000 annotations) so that they also match the
home pool's spill pools. Kueue then sees a new pod template and may assign a spill pool's flavor. If Kueue admits
the job at the same moment, the Job is no longer suspended and the apiserver refuses the change: the job simply
runs in its home pool. The job's own rows (`spilled`, the note saying why) are written by `jobs.services`."""

import logging
from datetime import timedelta

from django.db.models import DurationField, ExpressionWrapper, F
from django.utils import timezone

from cluster import resources
from cluster.errors import ClusterError
from cluster.manifests import ebcloud_annotations, scheduling_directives

from . import services
from .choices import JobState, Placement
from .manifests import manifest_spec
from .models import Job

log = logging.getLogger(__name__)


def due_jobs():
    """Spill-after jobs still waiting for admission N minutes after their Job was created."""
    now = timezone.now()
    waited = ExpressionWrapper(now - F("cluster_created_at"), output_field=DurationField())
    candidates = (
        Job.objects.filter(
            placement=Placement.SPILL_AFTER,
            spilled=False,
            state=JobState.QUEUED,
            cluster_created_at__isnull=False,
        )
        .annotate(waited=waited)
        .select_related("team", "pool")
    )
    return [job for job in candidates if job.waited >= timedelta(minutes=job.spill_after_minutes)]


def spill(job: Job) -> bool:
    """Widen the placement of `job`'s suspended Job; False when Kueue admitted it first (nothing changed)."""
    namespace, name = job.team.namespace, job.job_name
    soft = manifest_spec(job, soft=True)
    directives = scheduling_directives(soft)
    current = resources.read_job(namespace, name)
    if current is None or not current.spec.suspend:
        return False
    patch = [
        {"op": "test", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/spec/template/spec/affinity", "value": directives["affinity"]},
        {"op": "add", "path": "/spec/template/spec/tolerations", "value": directives["tolerations"]},
    ]
    if soft.ebcloud_annotations:
        for key, value in ebcloud_annotations(soft).items():
            patch.append(
                {"op": "add", "path": f"/spec/template/metadata/annotations/{key.replace('/', '~1')}", "value": value}
            )
    try:
        resources.patch_job(namespace, name, patch)
    except ClusterError as error:
        if error.status in (409, 422):  # admitted (unsuspended) meanwhile: its template is fixed now
            return False
        raise
    return services.mark_spilled(job_id=job.pk, spill_pools=[pool.slug for pool in soft.spill_pools])


def spill_due_jobs() -> list[int]:
    moved = []
    for job in due_jobs():
        try:
            if spill(job):
                moved.append(job.pk)
        except ClusterError as error:
            log.warning("could not move job %s to soft placement: %s", job.pk, error)
            services.note_spill_problem(job_id=job.pk, error=str(error))
    return moved
