"""Team volumes and secrets without the cluster: who may register them, that a job can only name its own team's
(another team's is unknown, in the form and the API), and that the lead's form keeps what was typed."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from jobs import services as job_services
from jobs.models import Job
from jobs.specs import JobSpec
from portal.models import AuditEntry
from teamdata import services
from teamdata.choices import SecretKind, VolumeState
from teamdata.models import TeamSecret, TeamVolume
from tests.factories import PoolFactory, QuotaFactory


@pytest.fixture
def pool(db):
    return PoolFactory(slug="train", name="Training", contracted_gpus=16)


@pytest.fixture
def volumes(team, other_team, lead, outsider):
    return {
        "alpha": services.register_volume(team=team, user=lead, name="datasets", source="created", size_gib=10),
        "beta": services.register_volume(team=other_team, user=outsider, name="beta-data", source="existing"),
    }


@pytest.fixture
def beta_secret(other_team):
    # Rows only (writing the Secret needs the cluster: tests/teamdata/test_cluster_team_data.py).
    return TeamSecret.objects.create(team=other_team, name="beta-hf", kind=SecretKind.OPAQUE, keys=["token"])


def test_register_is_for_leads_and_admins_and_audited(team, lead, researcher, platform_admin):
    with pytest.raises(PermissionDenied):
        services.register_volume(team=team, user=researcher, name="x", source="existing")
    volume = services.register_volume(team=team, user=platform_admin, name="shared", source="existing")
    assert volume.state == VolumeState.PENDING
    entry = AuditEntry.objects.get(action="volume.register")
    assert entry.actor_username == "ada" and entry.after["name"] == "shared"
    with pytest.raises(ValidationError) as error:
        services.register_volume(team=team, user=lead, name="new", source="created")
    assert "size_gib" in error.value.message_dict
    with pytest.raises(ValidationError) as error:
        services.register_volume(team=team, user=lead, name="shared", source="existing")
    assert "name" in error.value.message_dict


def _spec(**fields):
    return JobSpec(name="t", image="registry.example.com/a/train:1", gpus=1, memory_mib=8192, **fields)


def test_a_job_cannot_name_another_teams_volume_or_secret(team, pool, researcher, volumes, beta_secret):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    for spec, field in (
        (_spec(volumes=[{"name": "beta-data", "mount_path": "/data"}]), "volumes"),
        (_spec(image_pull_secrets=["beta-hf"]), "image_pull_secrets"),
        (_spec(secret_env={"T": {"secret": "beta-hf", "key": "token"}}), "secret_env"),
    ):
        with pytest.raises(ValidationError) as error:
            job_services.submit_job(team=team, pool=pool, user=researcher, spec=spec)
        assert field in error.value.message_dict
        assert "Alpha has no" in " ".join(error.value.message_dict[field])
    assert not Job.objects.exists()
    job = job_services.submit_job(
        team=team, pool=pool, user=researcher, spec=_spec(volumes=[{"name": "datasets", "mount_path": "/data"}])
    )
    assert job.volumes == [{"name": "datasets", "mount_path": "/data"}]


def test_a_failed_volume_or_a_missing_key_is_refused(team, pool, researcher, volumes):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    TeamSecret.objects.create(team=team, name="hf", kind=SecretKind.OPAQUE, keys=["token"])
    TeamVolume.objects.filter(pk=volumes["alpha"].pk).update(state=VolumeState.FAILED, state_reason="no such class")
    with pytest.raises(ValidationError) as error:
        job_services.submit_job(
            team=team,
            pool=pool,
            user=researcher,
            spec=_spec(
                volumes=[{"name": "datasets", "mount_path": "/data"}], secret_env={"T": {"secret": "hf", "key": "nope"}}
            ),
        )
    assert "no such class" in error.value.message_dict["volumes"][0]
    assert "has no key nope" in error.value.message_dict["secret_env"][0]
    with pytest.raises(ValidationError) as error:
        job_services.submit_job(team=team, pool=pool, user=researcher, spec=_spec(image_pull_secrets=["hf"]))
    assert "not an image pull credential" in error.value.message_dict["image_pull_secrets"][0]


def test_api_volumes_are_scoped_and_written_by_leads(team, researcher, lead, outsider, volumes):
    researcher_api, lead_api, outsider_api = APIClient(), APIClient(), APIClient()
    researcher_api.force_login(researcher)
    lead_api.force_login(lead)
    outsider_api.force_login(outsider)
    listed = researcher_api.get("/api/v1/volumes/").json()["results"]
    assert [row["name"] for row in listed] == ["datasets"]
    assert researcher_api.get(f"/api/v1/volumes/{volumes['beta'].pk}/").status_code == 404
    body = {"team": "alpha", "name": "more", "source": "created", "size_gib": 5, "access_mode": "ReadWriteMany"}
    assert researcher_api.post("/api/v1/volumes/", body, format="json").status_code == 403
    created = lead_api.post("/api/v1/volumes/", body, format="json")
    assert created.status_code == 201 and created.json()["state"] == "pending"
    refused = outsider_api.post("/api/v1/volumes/", {**body, "name": "sneaky"}, format="json")
    assert refused.status_code == 400 and "team" in refused.json()
    assert outsider_api.delete(f"/api/v1/volumes/{volumes['alpha'].pk}/").status_code == 404
    assert researcher_api.delete(f"/api/v1/volumes/{volumes['alpha'].pk}/").status_code == 403
    assert lead_api.delete(f"/api/v1/volumes/{volumes['alpha'].pk}/").status_code == 204


def test_api_job_submit_refuses_another_teams_volume(team, pool, researcher, volumes):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    client = APIClient()
    client.force_login(researcher)
    body = {
        "team": "alpha",
        "pool": "train",
        "name": "t1",
        "image": "registry.example.com/t/train:1",
        "gpus": 1,
        "volumes": [{"name": "beta-data", "mount_path": "/data"}],
    }
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400 and "volumes" in response.json()
    body["volumes"] = [{"name": "datasets", "mount_path": "/data", "read_only": False}]
    body["shm_gib"] = 2
    body["memory_mib"] = 8192
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["volumes"] == [{"name": "datasets", "mount_path": "/data", "read_only": False}]
    assert response.json()["shm_gib"] == 2


def test_submit_form_places_reference_errors_beside_their_fields(client, team, pool, researcher, volumes):
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    client.force_login(researcher)
    response = client.post(
        reverse("jobs:job_submit"),
        {
            "team": "alpha",
            "pool": "train",
            "name": "t1",
            "image": "registry.example.com/t/train:1",
            "gpus": 1,
            "cpu": "1",
            "memory_gib": "8",
            "placement": "strict",
            "priority": 50,
            "max_run_minutes": 60,
            "volumes": "beta-data:/data\ndatasets:/etc:rw",
            "shm_gib": 0,
        },
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "volumes" in errors
    assert not Job.objects.exists()


def test_volume_form_keeps_what_was_typed_and_says_what_is_wrong(client, team, lead, researcher):
    url = reverse("teamdata:volume_create", args=[team.slug])
    client.force_login(researcher)
    assert client.get(url).status_code == 404
    client.force_login(lead)
    response = client.post(url, {"name": "Bad Name", "source": "created", "storage_class": "local-data"})
    assert response.status_code == 400
    body = response.content.decode()
    assert 'value="Bad Name"' in body and 'value="local-data"' in body
    assert "Say how large the new claim is" in body
    response = client.post(
        url, {"name": "datasets", "source": "created", "size_gib": 20, "access_mode": "ReadWriteMany"}
    )
    assert response.status_code == 302
    page = client.get(reverse("portal:team_detail", args=[team.slug])).content.decode()
    assert "datasets" in page and "ReadWriteMany" in page


def test_demo_volume_is_registered_once(db):
    import io

    from django.core.management import call_command

    call_command("seed_demo", stdout=io.StringIO())
    call_command("demo_volume", stdout=io.StringIO())
    call_command("demo_volume", stdout=io.StringIO())
    volume = TeamVolume.objects.get()
    assert (volume.team.slug, volume.name, volume.size_gib, volume.storage_class) == (
        "llm",
        "datasets",
        100,
        "local-data",
    )
