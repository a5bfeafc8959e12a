"""The 30 s volume refresh judged a volume from its one list of claims even when that list could not hold the claim
yet: users saw a volume registered a moment ago turn Failed ("there is no claim named datasets ...", audited as
`volume.failed` by the system) while its `teamdata.ensure_volume` waited in the queue, and jobs submitted meanwhile
refused ("Volume datasets cannot be used: ..."); and a list taken just before the task made the claim and recorded
it Bound wrote Failed over it. A volume nothing has examined yet is now made by the refresh instead of judged, and
facts older than the volume's last record are not written over it."""

import pytest
from django.core.exceptions import ValidationError

from cluster import resources
from cluster.resources import StorageClassFacts
from cluster.team_data import ClaimFacts
from jobs import services as job_services
from jobs.specs import JobSpec
from portal.models import AuditEntry
from reconcile import volumes as reconcile_volumes
from teamdata import services
from teamdata.choices import VolumeState
from teamdata.models import TeamVolume
from tests.factories import PoolFactory, QuotaFactory


class FakeCluster:
    def __init__(self):
        self.claims: dict[tuple[str, str], ClaimFacts] = {}
        self.while_listing = None

    def create_claim(self, manifest):
        key = (manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        self.claims.setdefault(
            key,
            ClaimFacts(
                namespace=key[0],
                name=key[1],
                phase="Bound",
                capacity="10Gi",
                storage_class="local-data",
                access_modes=("ReadWriteOnce",),
                managed=True,
            ),
        )
        return True

    def read_claim(self, namespace, name):
        return self.claims.get((namespace, name))

    def list_claims(self):
        snapshot = dict(self.claims)
        if self.while_listing:  # what a worker does between the list and the sweep's writes
            self.while_listing()
        return snapshot

    def claim_warning(self, namespace, name):
        return ""

    def storage_classes(self):
        return [StorageClassFacts(name="local-data", provisioner="rancher.io/local-path", is_default=True)]

    def read_storage_class(self, name):
        return StorageClassFacts(name=name, provisioner="rancher.io/local-path", is_default=False)


@pytest.fixture
def cluster(monkeypatch, settings):
    settings.VOLUME_STORAGE_CLASSES = ["local-data"]
    fake = FakeCluster()
    for name in ("create_claim", "read_claim", "list_claims", "claim_warning", "storage_classes", "read_storage_class"):
        monkeypatch.setattr(resources, name, getattr(fake, name))
    monkeypatch.setattr(reconcile_volumes, "ensure_namespace", lambda team: None)
    return fake


@pytest.fixture
def pool(team):
    pool = PoolFactory(slug="train", name="Training", contracted_gpus=16)
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    return pool


def register(team, lead):
    return services.register_volume(
        team=team, user=lead, name="datasets", source="created", size_gib=10, storage_class="local-data"
    )


def test_a_refresh_before_the_claim_is_made_does_not_fail_the_new_volume(team, lead, researcher, pool, cluster):
    volume = register(team, lead)  # teamdata.ensure_volume is queued, not run yet
    reconcile_volumes.refresh_volumes()  # makes the claim itself (creating is idempotent), never judges it missing
    volume = TeamVolume.objects.get(pk=volume.pk)
    assert volume.state in (VolumeState.PENDING, VolumeState.BOUND), f"{volume.state}: {volume.state_reason}"
    assert not AuditEntry.objects.filter(action="volume.failed").exists()
    spec = JobSpec(
        name="t",
        image="registry.example.com/a/train:1",
        gpus=1,
        memory_mib=8192,
        volumes=[{"name": "datasets", "mount_path": "/data"}],
    )
    try:
        job_services.submit_job(team=team, pool=pool, user=researcher, spec=spec)
    except ValidationError as error:  # pragma: no cover - the defect
        pytest.fail(f"a job naming the new volume was refused: {error.message_dict}")


def test_a_refresh_with_an_older_list_does_not_undo_what_ensure_volume_just_recorded(team, lead, cluster):
    volume = register(team, lead)
    cluster.while_listing = lambda: reconcile_volumes.ensure_volume(
        TeamVolume.objects.select_related("team").get(pk=volume.pk)
    )
    reconcile_volumes.refresh_volumes()
    assert (team.namespace, "datasets") in cluster.claims
    volume = TeamVolume.objects.get(pk=volume.pk)
    assert volume.state == VolumeState.BOUND, f"{volume.state}: {volume.state_reason}"


def test_a_refresh_still_records_a_claim_gone_since_the_volume_was_last_checked(team, lead, cluster):
    """The control: facts newer than the last record are written (the claim deleted by hand: Failed)."""
    volume = register(team, lead)
    reconcile_volumes.ensure_volume(TeamVolume.objects.select_related("team").get(pk=volume.pk))
    assert TeamVolume.objects.get(pk=volume.pk).state == VolumeState.BOUND
    cluster.claims.clear()
    reconcile_volumes.refresh_volumes()
    volume = TeamVolume.objects.get(pk=volume.pk)
    assert volume.state == VolumeState.FAILED, f"{volume.state}: {volume.state_reason}"
    assert AuditEntry.objects.filter(action="volume.failed", object_id=str(volume.pk)).exists()
