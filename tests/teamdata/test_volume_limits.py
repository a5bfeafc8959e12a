"""Team volumes within what an admin sets (issue 24), without the cluster: caps on the number of volumes and the GiB
they request, a storage class allowlist, each refused beside its field with what is left; a volume a lead makes
read-only for researchers is mounted read-only by a researcher's job whatever the job asks (in the saved job, and in
the manifest of a job submitted before the volume was marked), while the lead's own jobs may still write."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from jobs import services as job_services
from jobs.manifests import render
from jobs.specs import JobSpec
from pools import services as pool_services
from portal.models import AuditEntry
from teamdata import services
from teamdata.models import TeamVolume
from tests.factories import PoolFactory, QuotaFactory


@pytest.fixture
def pool(team):
    pool = PoolFactory(slug="train", name="Training", contracted_gpus=16)
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    return pool


def register(team, user, name, size_gib=10, **fields):
    fields.setdefault("storage_class", "local-data")
    return services.register_volume(team=team, user=user, name=name, source="created", size_gib=size_gib, **fields)


def test_the_number_of_volumes_and_their_total_size_are_capped_per_team(team, other_team, lead, platform_admin):
    pool_services.set_namespace_limits(team=team, max_volumes=3, max_volume_storage_gib=100)
    register(team, lead, "a", 60)
    with pytest.raises(ValidationError) as refused:
        register(team, lead, "b", 41)
    assert refused.value.message_dict == {
        "size_gib": [f"{team.name}'s volumes may request 100 GiB in all; 40 GiB are left, not 41."]
    }
    register(team, lead, "b", 40)
    services.register_volume(team=team, user=lead, name="c", source="existing")  # an existing claim counts too
    with pytest.raises(ValidationError) as refused:
        register(team, platform_admin, "d", 1)  # admins are held to the team's caps as well
    assert refused.value.message_dict["name"][0].startswith(f"{team.name} may have at most 3 volumes and has 3.")
    # Another team's volumes are its own business; the default caps are 10 volumes and 10 TiB.
    register(other_team, platform_admin, "big", 10 * 1024)
    assert TeamVolume.objects.filter(team=team).count() == 3


def test_the_thousand_tib_volume_of_the_report_is_refused_by_default(team, lead):
    with pytest.raises(ValidationError) as refused:
        register(team, lead, "huge", 1000 * 1024)
    assert "size_gib" in refused.value.message_dict


def test_only_allowed_storage_classes_take_new_volumes(team, lead, settings):
    settings.VOLUME_STORAGE_CLASSES = ["fast", "tier-*"]
    register(team, lead, "one", storage_class="fast")
    register(team, lead, "two", storage_class="tier-2")
    register(team, lead, "three", storage_class="")  # the cluster's default class
    with pytest.raises(ValidationError) as refused:
        register(team, lead, "four", storage_class="local-data")
    assert refused.value.message_dict["storage_class"] == [
        "Storage class local-data is not open to team volumes; use one of: fast, tier-*."
    ]
    settings.VOLUME_STORAGE_CLASSES = []
    with pytest.raises(ValidationError) as refused:
        register(team, lead, "five", storage_class="fast")
    assert "leave the class empty" in refused.value.message_dict["storage_class"][0]
    # An existing claim was made around the portal: its class is what the namespace quota allowed.
    services.register_volume(team=team, user=lead, name="six", source="existing")


def test_the_volume_form_says_which_cap_was_met_beside_its_field(client, team, lead):
    pool_services.set_namespace_limits(team=team, max_volume_storage_gib=50)
    client.force_login(lead)
    url = reverse("teamdata:volume_create", args=[team.slug])
    response = client.post(url, {"name": "data", "source": "created", "size_gib": 51, "storage_class": "local-data"})
    assert response.status_code == 400
    assert response.context["form"].errors["size_gib"] == [
        f"{team.name}'s volumes may request 50 GiB in all; 50 GiB are left, not 51."
    ]


def _spec(volumes):
    return JobSpec(name="t", image="registry.example.com/a/train:1", gpus=1, memory_mib=8192, volumes=volumes)


def _mounts(job) -> dict:
    pod = render(job)["spec"]["template"]["spec"]
    claims = {
        volume["name"]: volume["persistentVolumeClaim"]
        for volume in pod["volumes"]
        if "persistentVolumeClaim" in volume
    }
    mounts = {mount["name"]: mount["readOnly"] for mount in pod["containers"][0]["volumeMounts"]}
    return {claim["claimName"]: (claim["readOnly"], mounts[name]) for name, claim in claims.items()}


def test_a_researchers_job_mounts_a_volume_read_only_for_researchers_read_only(team, pool, lead, researcher):
    register(team, lead, "weights", read_only_for_researchers=True)
    register(team, lead, "scratch")
    wanted = [
        {"name": "weights", "mount_path": "/weights", "read_only": False},
        {"name": "scratch", "mount_path": "/scratch", "read_only": False},
    ]
    job = job_services.submit_job(team=team, pool=pool, user=researcher, spec=_spec(wanted))
    assert job.volumes[0]["read_only"] is True and job.volumes[1]["read_only"] is False  # as the job page shows
    assert _mounts(job) == {"weights": (True, True), "scratch": (False, False)}
    # The lead's own job writes to it.
    by_lead = job_services.submit_job(team=team, pool=pool, user=lead, spec=_spec(wanted))
    assert _mounts(by_lead) == {"weights": (False, False), "scratch": (False, False)}


def test_marking_a_volume_read_only_reaches_researchers_jobs_not_yet_started(team, pool, lead, researcher):
    volume = register(team, lead, "scratch")
    job = job_services.submit_job(
        team=team, pool=pool, user=researcher, spec=_spec([{"name": "scratch", "mount_path": "/s", "read_only": False}])
    )
    assert _mounts(job) == {"scratch": (False, False)}
    with pytest.raises(PermissionDenied):
        services.set_read_only_for_researchers(volume=volume, user=researcher, read_only=True)
    services.set_read_only_for_researchers(volume=volume, user=lead, read_only=True)
    assert _mounts(job) == {"scratch": (True, True)}  # rendered when it is sent to the cluster
    entry = AuditEntry.objects.get(action="volume.access")
    assert entry.before["read_only_for_researchers"] is False and entry.after["read_only_for_researchers"] is True


def test_leads_mark_volumes_read_only_for_researchers_in_the_api_and_on_the_team_page(client, team, lead, researcher):
    volume = register(team, lead, "weights")
    api = APIClient()
    api.force_login(lead)
    answer = api.post(f"/api/v1/volumes/{volume.pk}/access/", {"read_only_for_researchers": True}, format="json")
    assert answer.status_code == 200 and answer.json()["read_only_for_researchers"] is True
    created = api.post(
        "/api/v1/volumes/",
        {
            "team": team.slug,
            "name": "ro",
            "size_gib": 1,
            "storage_class": "local-data",
            "read_only_for_researchers": True,
        },
        format="json",
    )
    assert created.status_code == 201 and TeamVolume.objects.get(name="ro").read_only_for_researchers
    client.force_login(lead)
    url = reverse("teamdata:volume_access", args=[team.slug, volume.pk])
    assert client.post(url, {"read_only": "0"}).status_code == 302
    volume.refresh_from_db()
    assert not volume.read_only_for_researchers
    page = client.get(reverse("portal:team_detail", args=[team.slug])).content.decode()
    assert page.count('<span class="tag">read-only for researchers</span>') == 1  # "ro", not "weights" any more
    client.force_login(researcher)
    assert client.post(url, {"read_only": "1"}).status_code == 404
