"""A volume registered while the apiserver was away longer than `teamdata.ensure_volume`'s retries: users saw the
page answer "registered", then, once the apiserver was back, the volume turn Failed for good ("there is no claim
named datasets ...": the task had given up, nothing sent it again, and the 30 s refresh only read claims), so every
job naming it was refused until the lead unregistered and registered it again. PRODUCT.md, "Promises under failure":
accepted means persisted, and persisted reaches the cluster without anyone's help once the service is back. The
refresh now makes the claim of a volume nothing has examined yet; a claim deleted by hand after it was made is not
made again (the volume says so)."""

import pytest

from cluster import resources
from cluster.errors import TransientClusterError
from cluster.resources import StorageClassFacts
from cluster.team_data import ClaimFacts
from portal.celery import app as celery_app
from portal.celery import collect_beat_schedule
from teamdata import services
from teamdata.choices import VolumeState
from teamdata.models import TeamVolume


class FakeCluster:
    def __init__(self):
        self.up = True
        self.claims: dict[tuple[str, str], ClaimFacts] = {}

    def _check(self):
        if not self.up:
            raise TransientClusterError("apiserver unreachable: ConnectionRefusedError")

    def create_claim(self, manifest):
        self._check()
        key = (manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        if key in self.claims:
            return False
        self.claims[key] = ClaimFacts(
            namespace=key[0],
            name=key[1],
            phase="Bound",
            capacity=manifest["spec"]["resources"]["requests"]["storage"],
            access_modes=tuple(manifest["spec"]["accessModes"]),
            storage_class=manifest["spec"].get("storageClassName", ""),
            managed=True,
        )
        return True

    def read_claim(self, namespace, name):
        self._check()
        return self.claims.get((namespace, name))

    def list_claims(self):
        self._check()
        return dict(self.claims)

    def claim_warning(self, namespace, name):
        self._check()
        return ""

    def storage_classes(self):
        self._check()
        return [StorageClassFacts(name="local-data", provisioner="rancher.io/local-path", is_default=True)]

    def read_storage_class(self, name):
        self._check()
        return StorageClassFacts(name=name, provisioner="rancher.io/local-path", is_default=False)


@pytest.fixture
def cluster(monkeypatch):
    fake = FakeCluster()
    for name in ("create_claim", "read_claim", "list_claims", "claim_warning", "storage_classes", "read_storage_class"):
        monkeypatch.setattr(resources, name, getattr(fake, name))
    monkeypatch.setattr("reconcile.volumes.ensure_namespace", lambda team: fake._check())
    return fake


def run_periodic_teamdata_tasks():
    for entry in collect_beat_schedule().values():
        if entry["task"].startswith("teamdata."):
            celery_app.tasks[entry["task"]].apply().get()


def test_a_volume_registered_during_an_apiserver_outage_gets_its_claim_once_it_is_back(
    team, lead, cluster, settings, monkeypatch
):
    import reconcile.tasks  # noqa: F401 - registers teamdata.ensure_volume

    settings.VOLUME_STORAGE_CLASSES = ["local-data"]
    volume = services.register_volume(
        team=team, user=lead, name="datasets", source="created", size_gib=10, storage_class="local-data"
    )
    # The outbox publishes teamdata.ensure_volume after the commit; the apiserver is down for longer than the task's
    # retries (CLUSTER_TASK_MAX_RETRIES, backoff capped at 5 min), so it gives up.
    cluster.up = False
    settings.CLUSTER_TASK_MAX_RETRIES = 2
    task = celery_app.tasks["teamdata.ensure_volume"]
    # As a worker would: the task retries itself (no countdown here) until its budget is spent (eager retries
    # re-raise Retry to the caller when eager exceptions propagate; a worker reschedules instead).
    monkeypatch.setitem(task.app.conf, "task_eager_propagates", False)
    assert isinstance(task.apply(args=[volume.pk]).result, TransientClusterError)  # given up
    monkeypatch.setitem(task.app.conf, "task_eager_propagates", True)
    # The apiserver comes back; the periodic work runs (a few times: well over a minute).
    cluster.up = True
    for _ in range(3):
        run_periodic_teamdata_tasks()
    volume = TeamVolume.objects.get(pk=volume.pk)
    assert (team.namespace, "datasets") in cluster.claims, (
        f"the claim was never created; the volume says {volume.state}: {volume.state_reason}"
    )
    assert volume.state == VolumeState.BOUND


def test_a_claim_deleted_by_hand_after_it_was_made_is_not_made_again(team, lead, cluster, settings):
    """The control: the refresh makes only claims nothing has examined; one an admin deleted stays deleted."""
    import reconcile.tasks  # noqa: F401 - registers teamdata.ensure_volume

    settings.VOLUME_STORAGE_CLASSES = ["local-data"]
    volume = services.register_volume(
        team=team, user=lead, name="datasets", source="created", size_gib=10, storage_class="local-data"
    )
    celery_app.tasks["teamdata.ensure_volume"].apply(args=[volume.pk]).get()
    assert TeamVolume.objects.get(pk=volume.pk).state == VolumeState.BOUND
    del cluster.claims[(team.namespace, "datasets")]  # an admin deletes the claim in the cluster
    for _ in range(3):
        run_periodic_teamdata_tasks()
    volume = TeamVolume.objects.get(pk=volume.pk)
    assert (team.namespace, "datasets") not in cluster.claims
    assert volume.state == VolumeState.FAILED
    assert volume.state_reason == f"there is no claim named datasets in {team.namespace}"


def test_a_volume_is_left_pending_while_its_claim_cannot_be_made_yet(team, lead, cluster, settings, monkeypatch):
    """A refresh that cannot make the claim yet leaves the volume Pending; its next run, the retry, makes it."""
    settings.VOLUME_STORAGE_CLASSES = ["local-data"]
    volume = services.register_volume(
        team=team, user=lead, name="datasets", source="created", size_gib=10, storage_class="local-data"
    )
    attempts = []

    def unreachable_the_first_time(manifest):
        attempts.append(manifest["metadata"]["name"])
        if len(attempts) == 1:
            raise TransientClusterError("apiserver unreachable: ConnectionRefusedError")
        return cluster.create_claim(manifest)

    monkeypatch.setattr(resources, "create_claim", unreachable_the_first_time)
    run_periodic_teamdata_tasks()
    volume = TeamVolume.objects.get(pk=volume.pk)
    assert volume.state == VolumeState.PENDING and volume.checked_at is None
    run_periodic_teamdata_tasks()
    assert TeamVolume.objects.get(pk=volume.pk).state == VolumeState.BOUND
    assert attempts == ["datasets", "datasets"]
