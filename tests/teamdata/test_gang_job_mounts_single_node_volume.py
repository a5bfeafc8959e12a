"""A multi-node job (one pod per node) could mount a ReadWriteOnce or ReadWriteOncePod team volume: users saw it
accepted and admitted by Kueue, then every pod but the first stay ContainerCreating ("Multi-Attach error: volume is
already used by pod(s)...") while the job held nodes x GPUs of the team's quota and of the bill until its maximum run
time. The portal knows the claim's access mode (chosen, or read back from the cluster), so such a submission is now
refused beside the volumes field; ReadWriteMany and ReadOnlyMany volumes, and one-node jobs, are not."""

import pytest
from django.core.exceptions import ValidationError

from jobs import services as job_services
from jobs.models import Job
from jobs.specs import JobSpec
from teamdata.choices import AccessMode, VolumeSource, VolumeState
from teamdata.models import TeamVolume
from tests.factories import PoolFactory, QuotaFactory


@pytest.fixture
def pool(team):
    pool = PoolFactory(slug="train", name="Training", contracted_gpus=16)
    QuotaFactory(team=team, pool=pool, max_gpus=16)
    return pool


@pytest.mark.parametrize("mode", [AccessMode.READ_WRITE_ONCE, AccessMode.READ_WRITE_ONCE_POD])
def test_a_multi_node_job_cannot_mount_a_volume_only_one_node_can_attach(team, pool, lead, mode):
    TeamVolume.objects.create(
        team=team,
        name="ckpt",
        source=VolumeSource.CREATED,
        size_gib=100,
        access_mode=mode,
        state=VolumeState.BOUND,
        capacity="100Gi",
    )
    spec = JobSpec(
        name="gang",
        image="registry.example.com/a/train:1",
        gpus=8,
        nodes=2,
        memory_mib=8192,
        volumes=[{"name": "ckpt", "mount_path": "/workspace/ckpt", "read_only": False}],
    )
    with pytest.raises(ValidationError) as refused:
        job_services.submit_job(team=team, pool=pool, user=lead, spec=spec)
    assert "one node only can attach" in refused.value.message_dict["volumes"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize("mode", [AccessMode.READ_WRITE_MANY, AccessMode.READ_ONLY_MANY])
def test_a_multi_node_job_may_mount_a_volume_many_nodes_can_attach(team, pool, lead, mode):
    TeamVolume.objects.create(
        team=team, name="shared", source=VolumeSource.CREATED, size_gib=100, access_mode=mode, state=VolumeState.BOUND
    )
    spec = JobSpec(
        name="gang",
        image="registry.example.com/a/train:1",
        gpus=8,
        nodes=2,
        memory_mib=8192,
        volumes=[{"name": "shared", "mount_path": "/workspace/ckpt", "read_only": False}],
    )
    assert job_services.submit_job(team=team, pool=pool, user=lead, spec=spec).nodes == 2


def test_a_one_node_job_may_mount_a_read_write_once_volume(team, pool, lead):
    TeamVolume.objects.create(
        team=team, name="ckpt", source=VolumeSource.CREATED, size_gib=100, state=VolumeState.BOUND
    )
    spec = JobSpec(
        name="single",
        image="registry.example.com/a/train:1",
        gpus=8,
        memory_mib=8192,
        volumes=[{"name": "ckpt", "mount_path": "/workspace/ckpt", "read_only": False}],
    )
    assert job_services.submit_job(team=team, pool=pool, user=lead, spec=spec).nodes == 1


def test_an_existing_claim_whose_access_mode_is_not_read_yet_waits_for_it(team, pool, lead):
    """An existing claim's mode is the model's default until the cluster has been asked: not taken as its mode."""
    TeamVolume.objects.create(team=team, name="shared", source=VolumeSource.EXISTING, state=VolumeState.PENDING)
    spec = JobSpec(
        name="gang",
        image="registry.example.com/a/train:1",
        gpus=8,
        nodes=2,
        memory_mib=8192,
        volumes=[{"name": "shared", "mount_path": "/workspace/ckpt"}],
    )
    with pytest.raises(ValidationError) as refused:
        job_services.submit_job(team=team, pool=pool, user=lead, spec=spec)
    assert "has not been read from the cluster" in refused.value.message_dict["volumes"][0]
