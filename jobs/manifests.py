"""From a Job row to the inputs of cluster.manifests (the rendering itself is pure and lives there)."""

import hashlib
import hmac

from django.conf import settings

from cluster.manifests import JobManifestSpec, PoolTarget, render_gang_service, render_job
from cluster.namespaces import render_rendezvous_policy
from cluster.team_data import SecretEnv, VolumeMount
from teamdata.selectors import read_only_volume_names

from .choices import Placement
from .models import Job


def pool_target(pool) -> PoolTarget:
    return PoolTarget(slug=pool.slug, node_selector=dict(pool.node_selector), taints=tuple(pool.taints))


def manifest_spec(job: Job, *, soft: bool | None = None, suspend: bool = True) -> JobManifestSpec:
    """The manifest inputs of `job`. Spill-after jobs render strict until moved (`job.spilled`)."""
    if soft is None:
        soft = job.placement == Placement.SOFT or (job.placement == Placement.SPILL_AFTER and job.spilled)
    spill_pools = tuple(pool_target(pool) for pool in job.pool.spill_pools.order_by("slug")) if soft else ()
    return JobManifestSpec(
        name=job.job_name,
        namespace=job.team.namespace,
        job_id=job.pk,
        team_slug=job.team.slug,
        image=job.image,
        gpus=job.gpus,
        cpu_millicores=job.cpu_millicores,
        memory_mib=job.memory_mib,
        home_pool=pool_target(job.pool),
        soft=soft,
        spill_pools=spill_pools,
        command=tuple(job.command),
        args=tuple(job.args),
        env=dict(job.env),
        priority=job.priority,
        max_run_seconds=job.max_run_minutes * 60,
        termination_grace_seconds=job.termination_grace_seconds,
        anti_affinity_group=job.anti_affinity_group,
        pod_annotations=dict(job.pod_annotations),
        ebcloud_annotations=settings.KUBE_WRITE_EBCLOUD_ANNOTATIONS,
        suspend=suspend,
        **team_data_fields(job),
        nodes=job.nodes,
        rendezvous_token=(rendezvous_token(job.pk) if job.pk else "<per-job token>") if job.is_gang else "",
        backoff_limit=job.retries,
    )


def rendezvous_token(job_id: int) -> str:
    """The per-job secret of a multi-node job's rendezvous (cluster.manifests.RENDEZVOUS_TOKEN_ENV): an HMAC of
    the job id under the portal's SECRET_KEY, so it is never stored, is the same on every render of the job (a
    retried submission), and tells nothing of another job's."""
    message = f"reservoir.rendezvous:{job_id}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def team_data_fields(job: Job) -> dict:
    """The manifest inputs of the job's team data: team volumes are claims and team secrets are Secrets of the
    same names in the team namespace. A volume its lead made read-only for researchers is mounted read-only in a
    researcher's job even if the job row says otherwise (it was submitted before the volume was marked)."""
    forced = (
        read_only_volume_names(team=job.team, user=job.submitted_by, names={item["name"] for item in job.volumes})
        if job.volumes
        else set()
    )
    return {
        "volumes": tuple(
            VolumeMount(
                claim_name=item["name"],
                mount_path=item["mount_path"],
                read_only=item.get("read_only", True) or item["name"] in forced,
            )
            for item in job.volumes
        ),
        "shm_gib": job.shm_gib,
        "image_pull_secrets": tuple(job.image_pull_secrets),
        "secret_env": tuple(
            SecretEnv(name=name, secret=ref["secret"], key=ref["key"]) for name, ref in job.secret_env.items()
        ),
    }


def render(job: Job, **kwargs) -> dict:
    return render_job(manifest_spec(job, **kwargs))


def render_service(job: Job, *, owner_uid: str | None = None) -> dict | None:
    """The headless Service of a multi-node job (None for a one-node job: it needs none)."""
    return render_gang_service(manifest_spec(job), owner_uid=owner_uid) if job.is_gang else None


def render_network_policy(job: Job) -> dict | None:
    """The NetworkPolicy that opens a multi-node job's rendezvous port to its own pods (None for a one-node job)."""
    if not job.is_gang:
        return None
    return render_rendezvous_policy(
        namespace=job.team.namespace, team_slug=job.team.slug, job_id=job.pk, job_name=job.job_name
    )
