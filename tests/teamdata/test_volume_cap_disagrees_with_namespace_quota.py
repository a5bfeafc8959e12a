"""The portal's volume caps disagreed with the ResourceQuota it writes from the same limits, which counts every claim
of the namespace. Users saw (b) a new volume accepted beside an existing 80 GiB claim under a 100 GiB cap, then
Failed ("the cluster refused the claim: ... exceeded quota"): an existing claim's size was counted as 0. Now its
reported capacity is counted, and the new volume is refused beside its size. And (a) at the volume cap the portal
said "remove one first", although removing a volume only forgets it and its claim keeps its place in the quota:
the message now says so. (Claims no registered volume stands for are still not counted at registration: see
`teamdata.services._check_volume_limits`.)"""

import pytest
from django.core.exceptions import ValidationError

from cluster import resources
from cluster.errors import ClusterError
from cluster.namespaces import render_resource_quota
from cluster.resources import StorageClassFacts
from cluster.team_data import ClaimFacts
from pools import services as pool_services
from pools.projection import namespace_spec
from reconcile import volumes as reconcile_volumes
from teamdata import services
from teamdata.choices import VolumeState
from teamdata.models import TeamVolume

CLASSES = [StorageClassFacts(name="local-data", provisioner="rancher.io/local-path", is_default=True)]


def gib(quantity: str) -> int:
    assert quantity.endswith("Gi")
    return int(quantity[:-2])


class QuotaEnforcingCluster:
    """Claims of team namespaces, admitted against the ResourceQuota the portal renders for the team (as the
    apiserver's quota admission does)."""

    def __init__(self, team):
        self.team = team
        self.claims: dict[tuple[str, str], ClaimFacts] = {}

    def add(self, namespace, name, size_gib, managed):
        self.claims[(namespace, name)] = ClaimFacts(
            namespace=namespace,
            name=name,
            phase="Bound",
            capacity=f"{size_gib}Gi",
            access_modes=("ReadWriteOnce",),
            storage_class="local-data",
            managed=managed,
        )

    def create_claim(self, manifest):
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        if (namespace, name) in self.claims:
            return False
        hard = render_resource_quota(namespace_spec(self.team, cluster_storage_classes=CLASSES))["spec"]["hard"]
        mine = [claim for (ns, _), claim in self.claims.items() if ns == namespace]
        size = gib(manifest["spec"]["resources"]["requests"]["storage"])
        used = sum(gib(claim.capacity) for claim in mine)
        if len(mine) + 1 > int(hard["persistentvolumeclaims"]) or used + size > gib(hard["requests.storage"]):
            raise ClusterError(
                f'apiserver answered 403 Forbidden: persistentvolumeclaims "{name}" is forbidden: exceeded quota',
                status=403,
            )
        self.add(namespace, name, size, managed=True)
        return True

    def read_claim(self, namespace, name):
        return self.claims.get((namespace, name))

    def claim_warning(self, namespace, name):
        return ""

    def storage_classes(self):
        return list(CLASSES)

    def read_storage_class(self, name):
        return next((item for item in CLASSES if item.name == name), None)


@pytest.fixture
def cluster(team, monkeypatch, settings):
    settings.VOLUME_STORAGE_CLASSES = ["local-data"]
    fake = QuotaEnforcingCluster(team)
    for name in ("create_claim", "read_claim", "claim_warning", "storage_classes", "read_storage_class"):
        monkeypatch.setattr(resources, name, getattr(fake, name))
    monkeypatch.setattr(reconcile_volumes, "ensure_namespace", lambda team: None)
    return fake


def register_and_make(team, user, name, **fields):
    """Register a volume as the page does; if the portal accepts it, run `teamdata.ensure_volume` for it."""
    volume = services.register_volume(team=team, user=user, name=name, **fields)
    reconcile_volumes.ensure_volume(TeamVolume.objects.select_related("team").get(pk=volume.pk))
    return TeamVolume.objects.get(pk=volume.pk)


def test_at_the_volume_cap_the_portal_does_not_promise_room_that_removing_a_volume_does_not_free(team, lead, cluster):
    pool_services.set_namespace_limits(team=team, max_volumes=2)
    register_and_make(team, lead, "a", source="created", size_gib=10, storage_class="local-data")
    register_and_make(team, lead, "b", source="created", size_gib=10, storage_class="local-data")
    with pytest.raises(ValidationError) as refused:
        services.register_volume(team=team, user=lead, name="c", source="created", size_gib=10)
    message = refused.value.message_dict["name"][0]
    assert "remove one first" not in message
    assert "its claim stays in the namespace and still counts" in message


def test_an_existing_claims_size_is_counted_like_the_namespace_quota_counts_it(team, lead, cluster):
    pool_services.set_namespace_limits(team=team, max_volume_storage_gib=100)
    cluster.add(team.namespace, "imported", 80, managed=False)  # made around the portal, within the quota
    existing = register_and_make(team, lead, "imported", source="existing")
    assert existing.state == VolumeState.BOUND and existing.capacity == "80Gi"
    try:
        volume = register_and_make(team, lead, "more", source="created", size_gib=50, storage_class="local-data")
    except ValidationError as error:
        assert "size_gib" in error.message_dict
        return
    assert volume.state != VolumeState.FAILED, f"accepted, then: {volume.state_reason}"


def test_a_new_volume_that_fits_beside_an_existing_claim_is_made(team, lead, cluster):
    """The control: the existing claim's capacity leaves 20 GiB, and a 20 GiB volume is accepted and made."""
    pool_services.set_namespace_limits(team=team, max_volume_storage_gib=100)
    cluster.add(team.namespace, "imported", 80, managed=False)
    register_and_make(team, lead, "imported", source="existing")
    volume = register_and_make(team, lead, "more", source="created", size_gib=20, storage_class="local-data")
    assert volume.state == VolumeState.BOUND, volume.state_reason
