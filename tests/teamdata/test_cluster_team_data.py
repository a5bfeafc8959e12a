"""Team volumes and secrets on the real local cluster with Kueue: a job mounting a team volume is scheduled only
once its claim is bound (the scheduler holds the pod with its reason until a PersistentVolume appears and the PV
controller binds the claim), the mounts and secret references are in the pod read back from the cluster, secrets
are written, rotated and deleted in the namespace, and a secret's value never appears in a page, an API answer,
the manifest preview, the audit log, the outbox or the logs."""

import base64
import json
import logging
import uuid

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from cluster import client
from jobs import services as job_services
from jobs.choices import JobState
from jobs.models import Job, Pod
from jobs.specs import JobSpec
from pools.models import Pool
from portal.choices import Role
from portal.models import AuditEntry, OutboxMessage
from reconcile import volumes as volume_reconciler
from teamdata import services
from teamdata.choices import VolumeState
from teamdata.models import TeamSecret, TeamVolume
from tests.clusterkit import KWOK_DELAY, job_state, set_quota, wait_for
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def lead(cluster_team):
    user = UserFactory(username=f"{cluster_team.slug}-lead")
    MembershipFactory(team=cluster_team, user=user, role=Role.LEAD)
    return user


def make_volume(storage_class: str, size: str = "5Gi", *, team: str | None = None, name: str = "") -> str:
    """A PersistentVolume made ahead of time in `storage_class`; assigned to `team` (its slug) if given."""
    name = name or f"{storage_class}-pv"
    labels = {"reservoir.io/team": team} if team else {}
    client.core().create_persistent_volume(
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": storage_class,
                "local": {"path": f"/var/lib/reservoir-test/{name}"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]}
                        ]
                    }
                },
            },
        }
    )
    return name


def pod_of(job: Job):
    pods = client.core().list_namespaced_pod(job.team.namespace, label_selector=f"reservoir.io/job-id={job.pk}").items
    return pods[0] if pods else None


def scheduler_says(job: Job) -> str:
    pod = pod_of(job)
    if pod is None:
        return ""
    return " ".join(c.message or "" for c in pod.status.conditions or [] if c.type == "PodScheduled")


def test_a_job_on_a_team_volume_waits_for_the_claim_to_bind_then_mounts_it(
    cluster_sync, cluster_team, lead, storage_class
):
    team = cluster_team
    volume = services.register_volume(
        team=team,
        user=lead,
        name="datasets",
        source="created",
        size_gib=1,
        access_mode="ReadOnlyMany",
        storage_class=storage_class,
    )
    claim = client.core().read_namespaced_persistent_volume_claim("datasets", team.namespace)
    assert claim.metadata.labels["app.kubernetes.io/managed-by"] == "reservoir"
    assert claim.spec.storage_class_name == storage_class and claim.status.phase == "Pending"
    volume.refresh_from_db()
    assert volume.state == VolumeState.PENDING and volume.state_reason

    services.save_secret(team=team, user=lead, name="hf", kind="opaque", values={"token": "hf-value"})
    services.save_secret(
        team=team,
        user=lead,
        name="creds",
        kind="registry",
        registry="registry.example.com",
        username="bot",
        password="pw-value",
    )
    set_quota(team, Pool.objects.get(slug="reserved-a800"), 8)
    spec = JobSpec(
        name="reads-data",
        image="registry.example.com/research/train:1.0",
        gpus=1,
        memory_mib=8192,
        pod_annotations={KWOK_DELAY: "10m"},
        volumes=[{"name": "datasets", "mount_path": "/data", "read_only": True}],
        shm_gib=2,
        image_pull_secrets=["creds"],
        secret_env={"HF_TOKEN": {"secret": "hf", "key": "token"}},
    )
    job = job_services.submit_job(
        team=team, pool=Pool.objects.get(slug="reserved-a800"), user=team.researcher, spec=spec
    )

    reason = wait_for(
        lambda: "unbound immediate PersistentVolumeClaims" in scheduler_says(job) and scheduler_says(job),
        timeout=90,
        what="the scheduler to hold the pod for its unbound claim",
    )
    wait_for(lambda: job_state(job.pk) == JobState.PENDING, timeout=60, what="the job to be Pending")
    assert pod_of(job).spec.node_name is None
    assert "PersistentVolumeClaim" in Pod.objects.get(job=job).pending_reason, reason

    make_volume(storage_class, team=team.slug)
    wait_for(
        lambda: (
            client.core().read_namespaced_persistent_volume_claim("datasets", team.namespace).status.phase == "Bound"
        ),
        timeout=90,
        what="the PV controller to bind the claim",
    )
    volume_reconciler.refresh_volumes()
    volume.refresh_from_db()
    assert volume.state == VolumeState.BOUND and volume.capacity == "5Gi"
    assert AuditEntry.objects.filter(action="volume.bound", object_id=str(volume.pk)).exists()
    wait_for(lambda: job_state(job.pk) == JobState.RUNNING, timeout=120, what="the job to run once the claim is bound")

    pod = client.api_client().sanitize_for_serialization(pod_of(job))
    assert pod["spec"]["nodeName"]
    volumes = {item["name"]: item for item in pod["spec"]["volumes"]}
    assert volumes["vol-0"]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    mounts = {item["mountPath"]: item for item in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/data"]["readOnly"] is True and mounts["/data"]["name"] == "vol-0"
    assert mounts["/dev/shm"]["name"] == "dshm"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "creds"}]
    env = {item["name"]: item for item in pod["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}


def test_a_claim_that_does_not_exist_is_failed_with_the_reason(portal_cluster, cluster_team, lead):
    volume = services.register_volume(team=cluster_team, user=lead, name="not-there", source="existing")
    volume.refresh_from_db()
    assert volume.state == VolumeState.FAILED
    assert "no claim named not-there" in volume.state_reason


def _secret_data(namespace: str, name: str) -> dict[str, str]:
    secret = client.core().read_namespaced_secret(name, namespace)
    return {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}


def test_secrets_are_written_rotated_and_never_shown(portal_cluster, cluster_team, lead, caplog):
    caplog.set_level(logging.DEBUG)
    team = cluster_team
    first, second, password = (f"v{uuid.uuid4().hex}" for _ in range(3))
    web = __import__("django.test", fromlist=["Client"]).Client()
    web.force_login(lead)
    api = APIClient()
    api.force_login(lead)
    answers = []

    # A named secret through the lead's page, image pull credentials through the API.
    created = web.post(
        reverse("teamdata:secret_create", args=[team.slug]),
        {"name": "hf", "kind": "opaque", "values": f"token={first}\nuser=bot"},
    )
    assert created.status_code == 302, created.content[:500]
    answers.append(created)
    assert _secret_data(team.namespace, "hf") == {"token": first, "user": "bot"}
    made = api.post(
        "/api/v1/secrets/",
        {
            "team": team.slug,
            "name": "creds",
            "kind": "registry",
            "registry": "registry.example.com",
            "username": "bot",
            "password": password,
        },
        format="json",
    )
    assert made.status_code == 201, made.content
    answers.append(made)
    pull = client.core().read_namespaced_secret("creds", team.namespace)
    assert pull.type == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(pull.data[".dockerconfigjson"]))
    assert config["auths"]["registry.example.com"]["password"] == password

    # Rotation: the Secret in the cluster holds the new value; the row says who and when.
    hf = TeamSecret.objects.get(team=team, name="hf")
    rotated = api.post(f"/api/v1/secrets/{hf.pk}/rotate/", {"values": {"token": second}}, format="json")
    assert rotated.status_code == 200, rotated.content
    answers.append(rotated)
    assert _secret_data(team.namespace, "hf") == {"token": second}
    assert rotated.json()["version"] == 2 and rotated.json()["rotated_by"] == lead.username
    assert rotated.json()["keys"] == ["token"]

    # Creating under a name the team already uses is refused (rotate it instead); the Secret is unchanged.
    again = web.post(
        reverse("teamdata:secret_create", args=[team.slug]),
        {"name": "hf", "kind": "opaque", "values": f"token={first}"},
    )
    assert again.status_code == 400 and "rotate it instead" in again.content.decode()
    answers.append(again)
    assert _secret_data(team.namespace, "hf") == {"token": second}

    # A form with an error never sends a typed value back.
    refused = web.post(reverse("teamdata:secret_rotate", args=[team.slug, hf.pk]), {"values": f"bad key={first}"})
    assert refused.status_code == 400
    answers.append(refused)

    # A job that uses them, and everything a user can see of it.
    set_quota(team, Pool.objects.get(slug="reserved-a800"), 8)
    job_body = {
        "team": team.slug,
        "pool": "reserved-a800",
        "name": "uses-secrets",
        "image": "registry.example.com/research/train:1.0",
        "gpus": 1,
        "image_pull_secrets": ["creds"],
        "secret_env": {"HF_TOKEN": {"secret": "hf", "key": "token"}},
        "pod_annotations": {KWOK_DELAY: "1m"},
    }
    researcher_api = APIClient()
    researcher_api.force_login(team.researcher)
    submitted = researcher_api.post("/api/v1/jobs/", job_body, format="json")
    assert submitted.status_code == 201, submitted.content
    answers.append(submitted)
    job_id = submitted.json()["id"]
    preview = web.post(
        reverse("jobs:job_submit_preview"),
        {
            "team": team.slug,
            "pool": "reserved-a800",
            "name": "p",
            "image": "registry.example.com/r/t:1",
            "gpus": 1,
            "cpu": "1",
            "memory_gib": "4",
            "placement": "strict",
            "priority": 50,
            "max_run_minutes": 60,
            "image_pull_secrets": "creds",
            "secret_env": "HF_TOKEN=hf/token",
        },
        HTTP_HX_REQUEST="true",
    )
    assert "secretKeyRef" in preview.content.decode() and "creds" in preview.content.decode()
    answers += [
        preview,
        web.get(reverse("portal:team_detail", args=[team.slug])),
        web.get(reverse("teamdata:secret_rotate", args=[team.slug, hf.pk])),
        web.get(reverse("jobs:job_detail", args=[job_id])),
        web.get(reverse("jobs:job_submit")),
        api.get("/api/v1/secrets/"),
        api.get(f"/api/v1/secrets/{hf.pk}/"),
        api.get(f"/api/v1/jobs/{job_id}/"),
        researcher_api.get("/api/v1/secrets/"),
    ]
    admin = UserFactory(username=f"{team.slug}-admin", is_platform_admin=True)
    admin_api = APIClient()
    admin_api.force_login(admin)
    answers.append(admin_api.get("/api/v1/audit/?page_size=500"))
    assert "hf" in answers[-5].content.decode()  # the secret's page lists it by name

    stored = [
        json.dumps(list(AuditEntry.objects.values()), default=str),
        json.dumps(list(Job.objects.filter(pk=job_id).values()), default=str),
        json.dumps(list(OutboxMessage.objects.values()), default=str),
        json.dumps(list(TeamSecret.objects.values()), default=str),
        caplog.text,
    ]
    for value in (first, second, password):
        for answer in answers:
            assert value not in answer.content.decode(), (answer.wsgi_request.path, value)
        for text in stored:
            assert value not in text
    assert AuditEntry.objects.filter(action="secret.rotate", actor_username=lead.username).exists()

    # Deleting removes the Secret from the namespace.
    assert api.delete(f"/api/v1/secrets/{hf.pk}/").status_code == 204
    assert "hf" not in {item.metadata.name for item in client.core().list_namespaced_secret(team.namespace).items}


def test_another_teams_secret_or_volume_is_never_reachable(portal_cluster, cluster_team, lead):
    from tests.clusterkit import integration_team

    others = integration_team("Other")
    other = next(others)
    try:
        other_lead = UserFactory(username=f"{other.slug}-lead")
        MembershipFactory(team=other, user=other_lead, role=Role.LEAD)
        secret = services.save_secret(team=other, user=other_lead, name="theirs", kind="opaque", values={"k": "v"})
        volume = services.register_volume(team=other, user=other_lead, name="their-data", source="existing")
        api = APIClient()
        api.force_login(lead)
        assert api.get(f"/api/v1/secrets/{secret.pk}/").status_code == 404
        assert (
            api.post(f"/api/v1/secrets/{secret.pk}/rotate/", {"values": {"k": "x"}}, format="json").status_code == 404
        )
        assert api.delete(f"/api/v1/volumes/{volume.pk}/").status_code == 404
        web = __import__("django.test", fromlist=["Client"]).Client()
        web.force_login(lead)
        assert web.get(reverse("teamdata:secret_rotate", args=[other.slug, secret.pk])).status_code == 404
        assert web.get(reverse("teamdata:secret_rotate", args=[cluster_team.slug, secret.pk])).status_code == 404
        set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
        refused = api.post(
            "/api/v1/jobs/",
            {
                "team": cluster_team.slug,
                "pool": "reserved-a800",
                "name": "x",
                "image": "registry.example.com/r/t:1",
                "gpus": 1,
                "secret_env": {"K": {"secret": "theirs", "key": "k"}},
                "volumes": [{"name": "their-data", "mount_path": "/data"}],
            },
            format="json",
        )
        assert refused.status_code == 400
        assert set(refused.json()) >= {"secret_env", "volumes"}
        assert _secret_data(other.namespace, "theirs") == {"k": "v"}
        assert TeamVolume.objects.filter(team=cluster_team).count() == 0
    finally:
        next(others, None)


def test_a_new_claim_of_a_storage_class_the_cluster_lacks_is_failed(portal_cluster, cluster_team, lead):
    missing = "rsv-test-no-such-class"  # allowed to team volumes (tests' settings), and not in the cluster
    volume = services.register_volume(
        team=cluster_team, user=lead, name="nowhere", source="created", size_gib=1, storage_class=missing
    )
    volume.refresh_from_db()
    assert volume.state == VolumeState.FAILED and f"no storage class {missing}" in volume.state_reason
    assert "nowhere" not in {
        claim.metadata.name
        for claim in client.core().list_namespaced_persistent_volume_claim(cluster_team.namespace).items
    }
